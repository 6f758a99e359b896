"""Who may talk to a listener: one Host rule and one bearer rule for every HTTP listener
(MCP, the observer API, the watch host) — docs/modes.md#http-listeners.

- **Host** (a DNS-rebinding defence): the header must be ``127.0.0.1:<port>``,
  ``localhost:<port>`` or ``[::1]:<port>`` (plus any extra names a listener was told to
  answer to), where ``<port>`` is the port the connection actually arrived on; names compare
  case-insensitively. Anything else, or no Host at all, is refused with 421.
- **Bearer**: ``Authorization: <scheme> <token>`` with the scheme ``Bearer`` in any case,
  compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Final

from starlette.types import Scope

LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
HOST_REFUSED: Final = "Host header does not name this server"


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lowercase bytes), or None."""
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _port(scope: Scope) -> int | None:
    server = scope.get("server")
    if not server or len(server) < 2 or not isinstance(server[1], int):
        return None
    return server[1]


def host_name(address: str) -> str:
    """An address as it appears in a Host header (IPv6 literals in brackets)."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def host_allowed(scope: Scope, extra_names: Iterable[str] = ()) -> bool:
    """Whether the request's Host names this listener: a loopback name (or one of
    ``extra_names``) with the port the connection came in on."""
    given = header(scope, b"host")
    port = _port(scope)
    if given is None or port is None:
        return False
    allowed = {f"{name}:{port}".lower() for name in (*LOOPBACK_NAMES, *map(host_name, extra_names))}
    return given.lower() in allowed


def bearer(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (any case of the scheme)."""
    value = header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def secret_matches(given: str | None, expected: str) -> bool:
    """Constant-time comparison; nothing given, or nothing expected, never matches."""
    if given is None or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())
