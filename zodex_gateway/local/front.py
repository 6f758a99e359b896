"""Local's front door for MCP over HTTP (docs/modes.md#http-listeners), in the Local
runtime and in ``zodex-gateway http`` alike: ``/mcp`` and ``/mcp/``, nothing else.

Before the MCP app sees a request: the Host header must name the loopback address we
listen on (a DNS-rebinding defence), then the token must match — from
``X-Zodex-Local-Token`` or ``Authorization: Bearer`` — compared in constant time (the rules
every listener shares are in :mod:`zodex_gateway.web.guard`). A refusal names what to do
(``refusal``), and the probes an OAuth client makes after a 401 (metadata, registration) are
answered with that same line as an OAuth error: the token is not something OAuth can get,
and a client that found no refusal would go on to open a browser or register itself.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Final

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from zodex_gateway.serve.mcp_http import Front, McpHttpApp
from zodex_gateway.web import guard
from zodex_system.secret_files import create_secret_file

TOKEN_HEADER = b"x-zodex-local-token"
MISSING_TOKEN = "missing or invalid token"
# Where OAuth clients look after a 401 (RFC 9728, RFC 8414, OpenID discovery, RFC 7591
# registration), with any path suffix the spec lets them add.
OAUTH_PROBES: Final = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
    "/register",
)
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


class LocalFront:
    def __init__(self, mcp: McpHttpApp, token: str, host: str, *, refusal: str = MISSING_TOKEN) -> None:
        """``host``: the address the listener is bound to, a name its Host header may give
        besides the loopback ones; ``refusal``: the one line a request without the token gets."""
        self._token = token
        self._refusal = refusal
        # Host checking is the guard's: it must know the port the connection came in on.
        self._guard = guard.ListenerGuard(
            mcp, name="MCP", errors=ERRORS, admit=self._admit, extra_hosts=(host,)
        )

    @classmethod
    def admitting(cls, token: str, host: str, *, refusal: str = MISSING_TOKEN) -> Front:
        """The front a Local listener on ``host`` puts around its MCP app."""
        return lambda mcp: cls(mcp, token, host, refusal=refusal)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._guard(scope, receive, send)

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


def _is_oauth_probe(path: str) -> bool:
    return any(path == probe or path.startswith(probe + "/") for probe in OAUTH_PROBES)


def oauth_refusal(refusal: str) -> Response:
    """An OAuth error (RFC 6749 section 5.2) whose description is the refusal: OAuth clients
    show ``error_description`` and stop, where a 404 sends them on to the next probe."""
    return guard.json_response(400, {"error": "invalid_request", "error_description": refusal})
