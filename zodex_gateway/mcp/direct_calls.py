"""``tools/call`` answered without the SDK's per-request machinery (docs/modes.md#direct-tool-calls).

For each request the SDK's dispatcher builds a dispatch context, a cancel scope, a task in
its task group, a per-request connection and session and (on 2026-07-28 connections) a
kernel, passes the message through memory streams and pydantic models on the way in and
out, and wraps it all in its OpenTelemetry middleware: answering here took a trivial stdio
call's gateway CPU from 1.7 to 1.4 ms (docs/benchmarks.md#where-the-time-goes). A transport
that can tell a plain ``tools/call`` apart hands it here, and everything else to the SDK.

What the SDK decides stays the SDK's: a request is taken only when its own checks pass —
the 2026-07-28 envelope (``classify_inbound_request``), the method's params at the
connection's version (``validate_client_request``, ``CallToolRequestParams``) — and
anything they would refuse goes to the SDK, which answers it as always. The result is shaped
by the SDK's own serialiser for the version, and stamped as it stamps it. The answer is
the same JSON-RPC message the SDK would write; only the SDK's server middleware (its
OpenTelemetry spans, which Zodex does not export) does not see these calls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.runner import modern_error_data
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp_types import INTERNAL_ERROR, SERVER_INFO_META_KEY
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from zodex_gateway.mcp.server import ToolHandlers

log = logging.getLogger("zodex.gateway")

METHOD: Final = "tools/call"
INVALID_RESULT: Final = "Handler returned an invalid result"  # the SDK's words

Json = dict[str, Any]


@dataclass(frozen=True)
class Accepted:
    """A ``tools/call`` the SDK would accept, with its typed params."""

    request_id: int | str
    params: types.CallToolRequestParams
    version: str


class DirectCalls:
    def __init__(self, server: Server[Any], handlers: ToolHandlers) -> None:
        self._server = server
        self._handlers = handlers
        # A cache hint for tool calls, or a middleware of our own, would shape every call:
        # then every call is the SDK's. Zodex configures neither; the SDK's own middleware
        # is its OpenTelemetry span.
        self._enabled = server.cache_hints.get(METHOD) is None and all(
            type(middleware).__module__.startswith("mcp.") for middleware in server.middleware
        )

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        return self._handlers.input_schema(name)

    def accept(self, message: object, version: str | None) -> Accepted | None:
        """The request, when it is a ``tools/call`` the SDK would serve on a connection at
        ``version`` (a handshake version once ``initialize`` was answered, or a 2026-07-28
        one, read from each request's envelope: pass ``MODERN``); else None."""
        if not self._enabled or version is None or not isinstance(message, dict):
            return None
        if message.get("method") != METHOD:
            return None
        request_id = message.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            return None
        if message.get("jsonrpc") != "2.0" or not message.keys() <= _REQUEST_KEYS:
            return None
        params = message.get("params")
        if not isinstance(params, dict):
            return None
        modern = version == MODERN
        if modern:
            route = classify_inbound_request(message)
            if isinstance(route, InboundLadderRejection):
                return None
            version = route.protocol_version
        elif version not in HANDSHAKE_PROTOCOL_VERSIONS or _has_modern_envelope(params):
            return None  # refused on a handshake connection: the SDK says how
        try:
            _methods.validate_client_request(METHOD, version, params)
            typed = types.CallToolRequestParams.model_validate(params, by_name=False)
        except (KeyError, ValidationError):
            return None
        return Accepted(request_id, typed, version)

    async def answer(self, call: Accepted, request: Any = None) -> Json:
        """The JSON-RPC response to an accepted call, as the SDK would write it; ``request``:
        the HTTP request it came in (None over stdio), which identity reads."""
        modern = call.version in MODERN_PROTOCOL_VERSIONS
        try:
            result = await self._handlers.call(call.params, call.params.meta, request)
            return {"jsonrpc": "2.0", "id": call.request_id, "result": self._serialize(result, call.version)}
        except Exception as exc:
            error = handler_exception_to_error_data(exc)
            if error is None:
                if modern:
                    error = modern_error_data(exc)
                else:
                    log.exception("handler for %r raised", METHOD)
                    error = types.ErrorData(code=0, message=str(exc))  # the SDK's code for it
            return {"jsonrpc": "2.0", "id": call.request_id, "error": error.model_dump(exclude_none=True)}

    def _serialize(self, result: types.CallToolResult, version: str) -> Json:
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        try:
            dumped = _methods.serialize_server_result(METHOD, version, dumped)
        except ValidationError:
            log.exception("handler for %r returned an invalid result", METHOD)
            raise MCPError(code=INTERNAL_ERROR, message=INVALID_RESULT) from None
        if version not in MODERN_PROTOCOL_VERSIONS:
            return dumped
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        meta = dumped.get("_meta")
        if meta is None:
            dumped["_meta"] = {SERVER_INFO_META_KEY: self._server.server_info_stamp}
        elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
            dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: self._server.server_info_stamp}
        return dumped


# Passed as the version of a 2026-07-28 connection: each request names its own.
MODERN: Final = "modern"
_REQUEST_KEYS: Final = frozenset({"jsonrpc", "id", "method", "params"})


def _has_modern_envelope(params: Mapping[str, Any]) -> bool:
    meta = params.get("_meta")
    return isinstance(meta, Mapping) and types.PROTOCOL_VERSION_META_KEY in meta
