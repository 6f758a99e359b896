"""Tool calls that wait, over streamable HTTP: progress on the call's own stream, and cancels.

The SDK answers a stateless POST either as one JSON body or as an event stream. JSON is the
cheaper, and a client that sends only ``Accept: application/json`` gets it; but a JSON answer
has no room for ``notifications/progress``, and on the per-request era (2026-07-28) only the
streaming answer notices the client closing its request, which is how that era cancels. So
two SDK apps serve one server (docs/modes.md#mcp-endpoint, "Waiting calls"):

- a ``tools/call`` that accepts an event stream goes to the streaming app when it carries a
  progress token, or speaks a per-request revision (there the SDK still answers JSON unless
  the call sends a note or runs 15 s);
- everything else goes to the JSON app.

In the handshake era a client cancels with a ``notifications/cancelled`` POST of its own,
which a stateless SDK cannot tie to the request it names. The session ids are ours, so it is
done here: a ``tools/call`` of a verified session is held under (session, request id) while
it runs, and a cancel from that same session ends it. Nothing else can: the key includes the
session id, which only its holder has.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Final

import anyio
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.types import Message, Receive, Scope, Send

from zodex_gateway.mcp import jsonrpc_rules
from zodex_gateway.web import guard

PROTOCOL_VERSION_HEADER: Final = b"mcp-protocol-version"
# The answer a cancelled handshake-era POST gets, should its client still read it.
CANCELLED: Final = "request cancelled by the client"
REQUEST_CANCELLED: Final = -32800  # JSON-RPC's code for it in the LSP convention MCP follows


class WaitingCalls:
    def __init__(self, json_app: Starlette, streaming_app: Starlette) -> None:
        self._json = json_app
        self._streaming = streaming_app
        self._running: dict[tuple[str, object], anyio.CancelScope] = {}

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Both apps' lifespans (each runs its SDK session manager) under the server's one."""
        started = False
        async with contextlib.AsyncExitStack() as stack:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    try:
                        for app in (self._json, self._streaming):
                            await stack.enter_async_context(app.router.lifespan_context(app))
                    except BaseException as exc:
                        await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                        raise
                    started = True
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    break
        if started:
            await send({"type": "lifespan.shutdown.complete"})

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, session: str | None
    ) -> None:
        """One admitted POST (its body already read; ``receive`` replays it)."""
        message = _parsed(body)
        method = message.get("method") if message is not None else None
        if message is not None and method == "notifications/cancelled" and session is not None:
            self._cancel(session, message)
        if method != "tools/call" or message is None:
            await self._json(scope, receive, send)
            return
        app = self._streaming if _wants_stream(scope, message) else self._json
        request_id = message.get("id")
        if session is None or jsonrpc_rules.usable_id(message) is None:
            await app(scope, receive, send)
            return
        key = (session, _id_key(request_id))
        started = False

        async def sending(reply: Message) -> None:
            nonlocal started
            started = started or reply["type"] == "http.response.start"
            await send(reply)

        with anyio.CancelScope() as cancel_scope:
            self._running[key] = cancel_scope
            try:
                await app(scope, receive, sending)
            finally:
                if self._running.get(key) is cancel_scope:
                    del self._running[key]
        if cancel_scope.cancelled_caught and not started:
            error = jsonrpc_rules.error(REQUEST_CANCELLED, CANCELLED, request_id)
            await guard.json_response(200, error)(scope, receive, send)

    def _cancel(self, session: str, message: dict[str, Any]) -> None:
        params = message.get("params")
        named = params.get("requestId") if isinstance(params, dict) else None
        if named is None or isinstance(named, bool) or not isinstance(named, str | int):
            return
        scope = self._running.get((session, _id_key(named)))
        if scope is not None:
            scope.cancel()


def _parsed(body: bytes) -> dict[str, Any] | None:
    """The body as a message, parsed only when it may be one this module acts on."""
    if b'"tools/call"' not in body and b'"notifications/cancelled"' not in body:
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None  # the SDK answers it
    return message if isinstance(message, dict) else None


def _wants_stream(scope: Scope, message: dict[str, Any]) -> bool:
    accept = guard.header(scope, b"accept") or ""
    if "text/event-stream" not in accept:
        return False
    version = guard.header(scope, PROTOCOL_VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return True  # per-request era: the stream is also how a cancel arrives
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and meta.get("progressToken") is not None


def _id_key(request_id: object) -> object:
    """Ids compare as JSON-RPC says: ``1`` and ``"1"`` are different requests."""
    return (type(request_id).__name__, request_id)
