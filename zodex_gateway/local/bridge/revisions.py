"""The two eras of MCP as the bridge meets them, and the answers it gives itself
(docs/modes.md#revisions).

A client speaks a handshake revision, agreed by ``initialize``, or the per-request revision,
named in every request's ``_meta``. The bridge never reshapes what the runtime answers; what
it answers itself (Local down, or a result it could not deliver) is shaped here, field for
field as the MCP SDK's server shapes it (``tests/integration/test_connect_revisions.py``
compares them). The version lists are the SDK's (``mcp_types.version``), written out so that
the bridge starts without the SDK; a unit test keeps them equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: Final = ("2026-07-28",)
LATEST_HANDSHAKE: Final = HANDSHAKE_VERSIONS[-1]

PROTOCOL_VERSION_META: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META: Final = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_META: Final = "io.modelcontextprotocol/serverInfo"

METHOD_NOT_FOUND: Final = -32601
INTERNAL_ERROR: Final = -32603
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

Json = dict[str, Any]


def per_request_version(message: Json) -> str | None:
    """The revision a per-request (2026-07-28 era) message names in its ``_meta``, else None."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def negotiated(requested: object) -> str:
    """The handshake revision the SDK answers ``initialize`` with."""
    return requested if isinstance(requested, str) and requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE


def response(request_id: object, result: Json) -> Json:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(request_id: object, code: int, message: str, data: object = None) -> Json:
    body: Json = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


class OwnAnswers:
    """The answers of a server named ``server_info`` with the tools ``list_tools()`` gives,
    at the revision each request speaks."""

    def __init__(self, server_info: Json, list_tools: Callable[[], list[Json]]) -> None:
        self.server_info = server_info
        self._list_tools = list_tools

    def answer(self, message: Json, instructions: str, not_running: str) -> Json:
        """The answer to a request the runtime cannot take (it is not running)."""
        request_id, method = message.get("id"), message.get("method")
        version = per_request_version(message)
        if version is not None and version not in MODERN_VERSIONS:
            supported = {"supported": list(MODERN_VERSIONS), "requested": version}
            return error(request_id, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", supported)
        modern = version is not None
        if method == "initialize" and not modern:
            params = message.get("params")
            requested = params.get("protocolVersion") if isinstance(params, dict) else None
            return response(request_id, self.initialize_result(negotiated(requested), instructions))
        if method == "server/discover" and modern:
            discover = {
                "capabilities": _CAPABILITIES,
                "instructions": instructions,
                "supportedVersions": list(MODERN_VERSIONS),
            }
            return response(request_id, self.stamped(self.listing(discover)))
        if method == "ping" and not modern:
            return response(request_id, {})
        if method == "tools/list":
            tools = {"tools": self._list_tools()}
            return response(request_id, self.stamped(self.listing(tools)) if modern else tools)
        if method == "tools/call":
            return self.tool_error(request_id, not_running, modern=modern)
        return error(request_id, METHOD_NOT_FOUND, "Method not found", method)

    def initialize_result(self, version: str, instructions: str) -> Json:
        return {
            "capabilities": _CAPABILITIES,
            "instructions": instructions,
            "protocolVersion": version,
            "serverInfo": self.server_info,
        }

    def tool_error(self, request_id: object, text: str, *, modern: bool) -> Json:
        result: Json = {"content": [{"type": "text", "text": text}], "isError": True}
        return response(request_id, self.stamped(result) if modern else result)

    def stamped(self, result: Json) -> Json:
        """A per-request era result: complete, and naming the server."""
        return {**result, "resultType": "complete", "_meta": {SERVER_INFO_META: self.server_info}}

    @staticmethod
    def listing(result: Json) -> Json:
        """A per-request era answer a client may cache: private to it, and not for long."""
        return {"cacheScope": "private", **result, "ttlMs": 0}


_CAPABILITIES: Final[Json] = {"tools": {"listChanged": False}}
