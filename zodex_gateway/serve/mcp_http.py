"""MCP over streamable HTTP: stateless JSON responses on ``/mcp``, behind the front of a
mode (:data:`Front`), which has already admitted the request: Local's
(:mod:`zodex_gateway.local.front`: Host and token), Sprite's (:mod:`zodex_gateway.sprite.auth`:
the key) or a fleet host's (:mod:`zodex_gateway.fleet.front`).

The body is read here, up to ``mcp.max-body`` (docs/modes.md#http-listeners): a larger one
is answered 413 with a JSON-RPC error naming the limit, and at most two bodies larger than
1 MiB are held at once (each from the moment it passes 1 MiB until its response starts), so
concurrent large patches cannot multiply the gateway's memory without bound.

Session ids (docs/agents.md#identity) are this app's too, since the SDK serves statelessly
and ignores them: a request's ``Mcp-Session-Id`` must be one the session key signed, else
404 with a JSON-RPC error before anything runs; a verified one is put in the request's
scope, where identity reads it. A handshake ``initialize`` answered 200 gets the id it came
with, or a new one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, Literal

import anyio
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from zodex_gateway.agents.identity import VERIFIED_SESSION_SCOPE_KEY
from zodex_gateway.agents.session_ids import SessionIds
from zodex_gateway.mcp import jsonrpc_rules
from zodex_gateway.mcp.server import server_for
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_gateway.serve.waiting_calls import WaitingCalls
from zodex_gateway.web import guard
from zodex_gateway.web.listener_limits import DEFAULT_MAX_BODY

SESSION_HEADER = b"mcp-session-id"
PROTOCOL_VERSION_HEADER = b"mcp-protocol-version"
UNKNOWN_SESSION = "Mcp-Session-Id was not issued by this server; send initialize without it for a new session"
LARGE_BODY: Final = 1024 * 1024
LARGE_BODIES_AT_ONCE: Final = 2


def size_text(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


class BodyTooLarge(Exception):
    pass


class McpHttpApp:
    """The MCP app a front serves what it admitted to, on ``/mcp``; other scopes than HTTP
    (the lifespan: the SDK's session manager) go to the SDK's app."""

    def __init__(
        self, server: Server[Any], *, max_body: int = DEFAULT_MAX_BODY, session_ids: SessionIds | None = None
    ) -> None:
        """``session_ids``: signs and verifies session ids; a key of this process only when None."""
        self._session_ids = session_ids or SessionIds.ephemeral()
        self.max_body = max_body
        self._large_bodies = anyio.Semaphore(LARGE_BODIES_AT_ONCE)
        self._calls = WaitingCalls(
            *(_sdk_app(server, json_response, max_body) for json_response in (True, False))
        )

    @classmethod
    def serving(
        cls,
        tools: ToolDispatcher,
        *,
        start_directory: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        session_ids: SessionIds | None = None,
    ) -> McpHttpApp:
        """The app serving ``tools`` through the SDK's server."""
        server = server_for(tools, start_directory=start_directory)
        return cls(server, max_body=max_body, session_ids=session_ids)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._calls.lifespan(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        session = self._verified_session(scope)
        if session is False:
            error = jsonrpc_rules.error(jsonrpc_rules.INVALID_REQUEST, UNKNOWN_SESSION)
            await guard.json_response(404, error)(scope, receive, send)
            return
        if session is not None:
            scope = {**scope, VERIFIED_SESSION_SCOPE_KEY: session}
        async with _LargeBodySlot(self._large_bodies) as slot:
            try:
                body = await self._read_body(scope, receive, slot)
            except BodyTooLarge:
                limit = f"request body exceeds mcp.max-body ({size_text(self.max_body)})"
                error = jsonrpc_rules.error(jsonrpc_rules.INVALID_REQUEST, limit)
                await guard.json_response(413, error)(scope, receive, send)
                return
            if jsonrpc_rules.SURROGATE_ESCAPE.search(body):
                refusal = _unicode_refusal(body)
                if refusal is not None:
                    reply = guard.json_response(200 if "result" in refusal else 400, refusal)
                    await reply(scope, receive, send)
                    return
            if _opens_handshake(scope, body):
                send = _with_session_id(send, session or self._session_ids.issue())
            await self._calls.serve(scope, _replay(body, receive), slot.releasing(send), body, session)

    def _verified_session(self, scope: Scope) -> str | Literal[False] | None:
        """The request's verified session id, None without one, False for any other:
        unsigned, malformed, oversized, or more than one."""
        given = [bytes(value) for key, value in scope.get("headers", []) if key == SESSION_HEADER]
        if not given:
            return None
        if len(given) == 1 and given[0].isascii():
            value = given[0].decode("ascii")
            if self._session_ids.verify(value):
                return value
        return False

    async def _read_body(self, scope: Scope, receive: Receive, slot: _LargeBodySlot) -> bytes:
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            raise BodyTooLarge
        if declared is not None and declared > LARGE_BODY:
            await slot.acquire()  # before reading: a waiting body stays in the client
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the app sees an empty body and answers no one
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > self.max_body:
                raise BodyTooLarge
            if size > LARGE_BODY:
                await slot.acquire()
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _sdk_app(server: Server[Any], json_response: bool, max_body: int) -> Starlette:
    return server.streamable_http_app(
        stateless_http=True,
        json_response=json_response,
        # Host checking is the front's (Local's must know the bound port); the SDK's is off.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        # Our limit is checked first; the SDK's own (4 MiB by default) must not be lower.
        max_request_body_size=max_body,
    )


# What a mode puts in front of the MCP app: its own admission rules (Host, secret, paths),
# then the app with the path rewritten to ``/mcp``.
Front = Callable[[McpHttpApp], ASGIApp]


def _content_length(scope: Scope) -> int | None:
    value = guard.header(scope, b"content-length")
    if value is None or not value.strip().isdigit():
        return None  # h11 has already refused a malformed one
    return int(value)


def _unicode_refusal(body: bytes) -> dict[str, Any] | None:
    """The SDK's parser refuses a lone surrogate escape as "not JSON"; Python's accepts it,
    so the refusal can name the field (docs/tools.md#errors)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None  # not JSON at all: the SDK answers -32700
    return jsonrpc_rules.unicode_refusal(message)


def _opens_handshake(scope: Scope, body: bytes) -> bool:
    """An ``initialize`` the SDK serves as a handshake: a per-request (2026-07-28 or later)
    revision in the header takes the SDK's other path, which has no sessions."""
    version = guard.header(scope, PROTOCOL_VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return False
    if b'"initialize"' not in body:
        return False  # most requests: no parse needed
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


def _with_session_id(send: Send, session: str) -> Send:
    """Sends the response with ``Mcp-Session-Id`` when it is a success."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 200:
            headers = [*message.get("headers", []), (SESSION_HEADER, session.encode("ascii"))]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body in one message, then the client's own messages (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


class _LargeBodySlot:
    """One of the few slots a large body needs; held until its response starts."""

    def __init__(self, semaphore: anyio.Semaphore) -> None:
        self._semaphore = semaphore
        self._held = False

    async def acquire(self) -> None:
        if not self._held:
            await self._semaphore.acquire()
            self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._semaphore.release()

    def releasing(self, send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.release()  # the request is decoded and handled; its memory goes soon
            await send(message)

        return sending

    async def __aenter__(self) -> _LargeBodySlot:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
