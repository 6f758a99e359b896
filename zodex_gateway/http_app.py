"""Streamable HTTP transport: stateless JSON responses on ``/mcp`` and ``/mcp/``, guarded.

Before the MCP app sees a request: the Host header must name the loopback address we
listen on (a DNS-rebinding defence), then the token must match — from
``X-Zodex-Local-Token`` or ``Authorization: Bearer`` — compared in constant time.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
TOKEN_HEADER = b"x-zodex-local-token"


def load_or_create_token(path: Path) -> str:
    """The token in ``path``; a fresh 64-character one (file mode 0600) if there is none."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token
    token = path.read_text().strip()
    if len(token) < 32:
        raise ValueError(f"token in {path} is too short (at least 32 characters)")
    return token


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def _reply(send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardedMcpApp:
    def __init__(self, server: Server[Any], token: str, host: str) -> None:
        self._token = token.encode()
        self._host = host
        self.port = 0  # set once the listening socket is bound
        self._app = server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            # Host checking is ours (it must know the bound port); the SDK's is off.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    def _host_allowed(self, scope: Scope) -> bool:
        host = _header(scope, b"host")
        if host is None:
            return False
        names = (*LOOPBACK_NAMES, self._host)
        return any(host == f"{name}:{self.port}" for name in names)

    def _token_ok(self, scope: Scope) -> bool:
        given = _header(scope, TOKEN_HEADER)
        if given is None:
            auth = _header(scope, b"authorization") or ""
            scheme, _, value = auth.partition(" ")
            given = value.strip() if scheme.lower() == "bearer" else None
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if not self._host_allowed(scope):
            await _reply(send, 421, "Host header does not name this server")
            return
        if scope["path"] not in ("/mcp", "/mcp/"):
            await _reply(send, 404, "not found; the MCP endpoint is /mcp")
            return
        if not self._token_ok(scope):
            await _reply(send, 401, "missing or invalid token", [(b"www-authenticate", b"Bearer")])
            return
        await self._app({**scope, "path": "/mcp", "raw_path": b"/mcp"}, receive, send)
