"""Plain 2026-07-28 ``tools/call`` requests over HTTP answered directly (docs/modes.md#direct-tool-calls).

The SDK serves each such POST through its Starlette app, its session manager and
``handle_modern_request``, which builds a request object, a dispatch context, a connection
and a kernel for it. This takes the request only when every check the SDK makes before
dispatching would pass — the protocol version header names a 2026-07-28 revision, the
content type is JSON, the client accepts JSON, no routing header is doubled, the envelope
agrees with the headers (``classify_inbound_request``), the params pass the SDK's checks
(:class:`DirectCalls`), and no ``Mcp-Param-*`` header disagrees with the tool's schema —
and answers it as the SDK's JSON response mode does: ``application/json``, the JSON-RPC
reply, an error's HTTP status from the SDK's table. Anything else goes to the SDK.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from mcp.server.streamable_http import check_accept_headers
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    X_MCP_HEADER_KEY,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from zodex_gateway.mcp.direct_calls import MODERN, Accepted, DirectCalls

_PARAM_HEADER_PREFIX: Final = MCP_PARAM_HEADER_PREFIX.lower()  # ASGI header names are lowercase


class DirectHttpCalls:
    def __init__(self, calls: DirectCalls) -> None:
        self._calls = calls
        # Per tool: whether its input schema declares any Mcp-Param header (x-mcp-header).
        self._declaring: dict[str, bool] = {}

    def accept(self, scope: Scope, body: bytes) -> Accepted | None:
        """The call in this POST, if the SDK would dispatch it; else None."""
        if scope.get("method") != "POST":
            return None
        headers = Headers(scope=scope)
        version = headers.get("mcp-protocol-version")
        if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
            return None  # the SDK's handshake-era paths
        content_type = headers.get("content-type")
        if content_type is None or not content_type.lower().startswith("application/json"):
            return None
        if not check_accept_headers(Request(scope))[0]:
            return None
        if b'"tools/call"' not in body:
            return None  # most other requests: no parse needed
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        if find_duplicated_routing_header(headers.items()) is not None:
            return None
        if isinstance(classify_inbound_request(message, headers=dict(headers)), InboundLadderRejection):
            return None
        call = self._calls.accept(message, MODERN)
        if call is None or self._param_headers_refused(call, headers):
            return None
        return call

    def _param_headers_refused(self, call: Accepted, headers: Headers) -> bool:
        arguments: Mapping[str, Any] = call.params.arguments or {}
        if not arguments and not any(name.startswith(_PARAM_HEADER_PREFIX) for name in headers):
            return False
        name = call.params.name
        schema = self._calls.input_schema(name)
        if schema is None or not self._declares_param_headers(name, schema):
            return False  # nothing declared: the SDK's check walks the schema to find nothing
        return validate_mcp_param_headers(schema, arguments, headers) is not None

    def _declares_param_headers(self, name: str, schema: Mapping[str, Any]) -> bool:
        declares = self._declaring.get(name)
        if declares is None:
            declares = self._declaring[name] = X_MCP_HEADER_KEY in json.dumps(schema)
        return declares

    async def respond(self, call: Accepted, scope: Scope, receive: Receive, send: Send) -> None:
        message = await self._calls.answer(call, Request(scope))
        error = message.get("error")
        status = ERROR_CODE_HTTP_STATUS.get(error["code"], 200) if isinstance(error, dict) else 200
        body = json.dumps(message, separators=(",", ":"))
        await Response(body, status_code=status, media_type="application/json")(scope, receive, send)
