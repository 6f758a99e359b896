"""What the front door of every HTTP listener is made of — Local's MCP front, the observer
API, the watch host (docs/modes.md#http-listeners) — knowing none of them.

- **Host** (a DNS-rebinding defence), checked first: the header must be ``127.0.0.1:<port>``,
  ``localhost:<port>`` or ``[::1]:<port>`` (plus any extra names a listener was told to
  answer to), where ``<port>`` is the port the connection actually arrived on; names compare
  case-insensitively. Anything else, or no Host at all, is refused with 421.
- **Bearer**: ``Authorization: <scheme> <token>`` with the scheme ``Bearer`` in any case,
  compared in constant time.

:class:`ListenerGuard` applies the Host rule, then the listener's own admission rule (its
secret, paths and methods), and answers every refusal as JSON in the listener's shape
(:class:`JsonErrors`). Headers a listener always sends (``Cache-Control: no-store``, a
content security policy) go on every response, its app's and the refusals' alike.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("zodex.gateway")

LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
HOST_REFUSED: Final = "Host header does not name this server"

# What a listener's admission rule gives back: the scope to serve (possibly rewritten), or
# the answer that ends the request before the app sees it.
Admit = Callable[[Scope], "Scope | Response"]


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lowercase bytes), or None."""
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def header_values(scope: Scope, name: bytes) -> list[str]:
    """Every value of header ``name`` (lowercase bytes), in order."""
    return [bytes(value).decode("latin-1") for key, value in scope.get("headers", []) if key == name]


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
    return None if value is None else bearer_token(value)


def bearer_token(value: str) -> str | None:
    """The token of one ``Authorization`` value ``Bearer <token>`` (any case of the scheme)."""
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def secret_matches(given: str | None, expected: str) -> bool:
    """Constant-time comparison; nothing given, or nothing expected, never matches."""
    if given is None or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def json_response(status_code: int, content: Any, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON answer, serialized the one way every listener does."""
    return JSONResponse(content, status_code=status_code, headers=headers)


class JsonErrors:
    """A listener's error shape: ``{"error": "one line"}``, after ``schema_version`` where
    the listener's API has one (the observer and the watch host; not MCP)."""

    def __init__(self, *, schema_version: int | None = None) -> None:
        self._fields: dict[str, Any] = {} if schema_version is None else {"schema_version": schema_version}

    def response(self, status_code: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
        return json_response(status_code, {**self._fields, "error": message}, headers)


class ListenerGuard:
    """Host, then ``admit``, then the app; see the module docstring.

    ``always`` are headers put on every response, replacing any of the same name the app
    set. With ``catch_errors`` a failure of the app before its response started becomes a
    JSON 500 (logged as ``<name> request failed``); otherwise it propagates to the server.
    Other scopes than HTTP (the lifespan) go to the app unchecked.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        name: str,
        errors: JsonErrors,
        admit: Admit,
        extra_hosts: Iterable[str] = (),
        always: Iterable[tuple[bytes, bytes]] = (),
        catch_errors: bool = False,
    ) -> None:
        self._app = app
        self._name = name
        self._errors = errors
        self._admit = admit
        self._extra_hosts = tuple(extra_hosts)
        self._always = list(always)
        self._always_names = frozenset(key for key, _ in self._always)
        self._catch_errors = catch_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = False
        downstream = send

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if self._always:
                    kept = [h for h in message.get("headers", []) if h[0].lower() not in self._always_names]
                    message = {**message, "headers": [*kept, *self._always]}
            await downstream(message)

        if self._always or self._catch_errors:
            send = sending
        if not host_allowed(scope, self._extra_hosts):
            admitted: Scope | Response = self._errors.response(421, HOST_REFUSED)
        else:
            admitted = self._admit(scope)
        if isinstance(admitted, Response):
            _log_refusal(self._name, scope, admitted.status_code)
            await admitted(scope, receive, send)
            return
        if not self._catch_errors:
            await self._app(admitted, receive, send)
            return
        try:
            await self._app(admitted, receive, send)
        except Exception:
            log.exception("%s request failed: %s", self._name, scope.get("path"))
            if started:
                raise
            await self._errors.response(500, "internal error")(scope, receive, send)


def _log_refusal(name: str, scope: Scope, status: int) -> None:
    # A wrong secret or Host is someone knocking: a warning; a wrong path or method, info.
    level = logging.WARNING if status in (401, 403, 421) else logging.INFO
    path = json.dumps(str(scope.get("path", ""))[:200], ensure_ascii=True)  # client input: one line
    log.log(level, "%s request refused with %d: %s %s", name, status, scope.get("method", "?"), path)
