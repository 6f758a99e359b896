"""Streamable HTTP transport: stateless JSON responses on ``/mcp`` and ``/mcp/``, guarded.

Before the MCP app sees a request: the Host header must name the loopback address we
listen on (a DNS-rebinding defence), then the token must match — from
``X-Zodex-Local-Token`` or ``Authorization: Bearer`` — compared in constant time (the rules
every listener shares are in :mod:`zodex_gateway.web.guard`). A refusal names what to do
(``refusal``), and the probes an OAuth client makes after a 401 (metadata, registration) are
answered with that same line as an OAuth error: the token is not something OAuth can get,
and a client that found no refusal would go on to open a browser or register itself.
Then the body is read here,
up to ``mcp.max-body`` (docs/modes.md#http-listeners): a larger one is answered 413 with a
JSON-RPC error naming the limit, and at most two bodies larger than 1 MiB are held at once
(each from the moment it passes 1 MiB until its response starts), so concurrent large
patches cannot multiply the gateway's memory without bound.

Session ids (docs/agents.md#identity) are the guard's too, since the SDK serves statelessly
and ignores them: a request's ``Mcp-Session-Id`` must be one the session key signed, else
404 with a JSON-RPC error before anything runs; a verified one is put in the request's
scope, where identity reads it. A handshake ``initialize`` answered 200 gets the id it came
with, or a new one.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any, Final, Literal

import anyio
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from zodex_gateway.agents.identity import VERIFIED_SESSION_SCOPE_KEY
from zodex_gateway.agents.session_ids import SessionIds
from zodex_gateway.mcp import jsonrpc_rules
from zodex_gateway.mcp.server import ToolHandlers, server_for
from zodex_gateway.web import guard
from zodex_gateway.web.listener_limits import DEFAULT_MAX_BODY
from zodex_system.secret_files import create_secret_file

TOKEN_HEADER = b"x-zodex-local-token"
SESSION_HEADER = b"mcp-session-id"
PROTOCOL_VERSION_HEADER = b"mcp-protocol-version"
MISSING_TOKEN = "missing or invalid token"
# Where OAuth clients look after a 401 (RFC 9728, RFC 8414, OpenID discovery, RFC 7591
# registration), with any path suffix the spec lets them add.
OAUTH_PROBES: Final = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
    "/register",
)
UNKNOWN_SESSION = "Mcp-Session-Id was not issued by this server; send initialize without it for a new session"
LARGE_BODY: Final = 1024 * 1024
LARGE_BODIES_AT_ONCE: Final = 2
ERRORS: Final = guard.JsonErrors()


def load_or_create_token(path: Path) -> str:
    """The token in ``path``; a fresh 64-character one (file mode 0600) if there is none."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(32)
        try:
            create_secret_file(path, (token + "\n").encode())
            return token
        except FileExistsError:
            pass  # made meanwhile by another gateway: that one is the token
    token = path.read_text().strip()
    if len(token) < 32:
        raise ValueError(f"token in {path} is too short (at least 32 characters)")
    return token


def size_text(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


class BodyTooLarge(Exception):
    pass


class GuardedMcpApp:
    def __init__(
        self,
        server: Server[Any],
        token: str,
        host: str,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        session_ids: SessionIds | None = None,
        refusal: str = MISSING_TOKEN,
    ) -> None:
        """``session_ids``: signs and verifies session ids; a key of this process only when None.
        ``refusal``: the one line a request without the token gets."""
        self._token = token
        self._refusal = refusal
        self._session_ids = session_ids or SessionIds.ephemeral()
        self.max_body = max_body
        self._large_bodies = anyio.Semaphore(LARGE_BODIES_AT_ONCE)
        self._app = server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            # Host checking is ours (it must know the bound port); the SDK's is off.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            # Our limit is checked first; the SDK's own (4 MiB by default) must not be lower.
            max_request_body_size=max_body,
        )
        # Host checking is ours: it must know the port the connection came in on.
        self._guard = guard.ListenerGuard(
            self._serve, name="MCP", errors=ERRORS, admit=self._admit, extra_hosts=(host,)
        )

    @classmethod
    def serving(
        cls,
        handlers: ToolHandlers,
        token: str,
        host: str,
        *,
        start_directory: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        session_ids: SessionIds | None = None,
        refusal: str = MISSING_TOKEN,
    ) -> GuardedMcpApp:
        """The app serving ``handlers`` through the SDK's server."""
        server = server_for(handlers, start_directory=start_directory)
        return cls(server, token, host, max_body=max_body, session_ids=session_ids, refusal=refusal)

    def _token_ok(self, scope: Scope) -> bool:
        given = guard.header(scope, TOKEN_HEADER)
        if given is None:
            given = guard.bearer(scope)
        return guard.secret_matches(given, self._token)

    def _admit(self, scope: Scope) -> Scope | Response:
        path: str = scope["path"]
        if path not in ("/mcp", "/mcp/"):
            if _is_oauth_probe(path):
                return oauth_refusal(self._refusal)
            return ERRORS.response(404, "not found; the MCP endpoint is /mcp")
        if not self._token_ok(scope):
            return ERRORS.response(401, self._refusal, {"WWW-Authenticate": "Bearer"})
        return {**scope, "path": "/mcp", "raw_path": b"/mcp"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._guard(scope, receive, send)

    async def serve_admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a request another front door has admitted (Sprite's key and Host rules):
        the body limit and the MCP app, without this app's own Host and token checks."""
        await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
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
            await self._app(scope, _replay(body, receive), slot.releasing(send))

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


def _is_oauth_probe(path: str) -> bool:
    return any(path == probe or path.startswith(probe + "/") for probe in OAUTH_PROBES)


def oauth_refusal(refusal: str) -> Response:
    """An OAuth error (RFC 6749 section 5.2) whose description is the refusal: OAuth clients
    show ``error_description`` and stop, where a 404 sends them on to the next probe."""
    return guard.json_response(400, {"error": "invalid_request", "error_description": refusal})


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
