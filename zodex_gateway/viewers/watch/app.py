"""The watch host's HTTP app: Liveboard and an allowlisted proxy, behind a capability URL.

A guard runs before any route: a ``Host`` header that is not the bound loopback address
is a 421 (DNS rebinding; the rule every listener shares, :mod:`zodex_gateway.web.guard`),
a first path segment that is not the per-run secret (compared in constant time) is a 404,
and so is any method but GET, PUT and POST; a PUT from another page's origin is a 403. Under ``/<secret>/`` the routes are Liveboard's
files, the observer's read routes, its alias route, and the steer route (a person's
keystrokes, sent on with the steer token, only with Liveboard's own Origin and only from a
connection this account opened).
Anything else is a 404. Every response is ``no-store``, sends no
referrer (the secret is in the URL) and carries a strict content security policy; no CORS
header is ever sent.
"""

from __future__ import annotations

import hmac
import os
import re
from pathlib import Path
from typing import Final
from urllib.parse import quote

import anyio
import httpx2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from zodex_gateway.observer.views import API_SCHEMA_VERSION
from zodex_gateway.viewers.liveboard import STATIC_DIR
from zodex_gateway.viewers.watch.peer import peer_uid
from zodex_gateway.viewers.watch.proxy import ObserverProxy, ObserverUnavailable
from zodex_gateway.web import guard

MAX_ALIAS_BODY: Final = 4096
# The observer bounds the characters (limits.max-chars-chars); this only stops a flood early.
MAX_STEER_BODY: Final = 4 * 1024 * 1024
# Ids the observer hands out (4-character agents, 13-character invocations), with room to grow;
# never "." or "..", which a URL parser would fold into the path.
_ID: Final = r"[A-Za-z0-9_-][A-Za-z0-9_.~-]{0,127}"
_READ_ROUTES: Final = tuple(
    re.compile(pattern)
    for pattern in (
        "status",
        "agents",
        f"agents/{_ID}",
        "timeline",
        f"timeline/{_ID}",
        "invocations",
        f"invocations/{_ID}",
        f"invocations/{_ID}/output",
    )
)
_STEER_ACTIONS: Final = ("input", "takeover")  # typing, and taking a session over
_STATIC_NAME: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*\.(html|js|css|svg)")
_CONTENT_TYPES: Final = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
_SECURITY_HEADERS: Final = (
    (b"cache-control", b"no-store"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:;"
        b" base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
)
ERRORS: Final = guard.JsonErrors(schema_version=API_SCHEMA_VERSION)


def own_origins(port: int) -> set[bytes]:
    """The ``Origin`` of Liveboard's own page, as a browser sends it."""
    return {f"http://{name}:{port}".encode() for name in ("127.0.0.1", "localhost")}


class _SecretPath:
    """The watch host's admission: the secret path, GET or PUT, and a PUT only from
    Liveboard's own page; strips ``/<secret>`` before the routes."""

    def __init__(self, secret: str, port: int) -> None:
        self._secret = secret.encode()
        self._origins = own_origins(port)

    def __call__(self, scope: Scope) -> Scope | Response:
        headers = dict(scope["headers"])
        path: str = scope["path"]
        first = path[1:].split("/", 1)[0]
        inner = path[len(first) + 1 :]
        method = scope["method"]
        if not hmac.compare_digest(first.encode(), self._secret) or method not in ("GET", "PUT", "POST"):
            return ERRORS.response(404, "not found")
        origin = headers.get(b"origin", b"").lower()
        if method == "PUT" and origin not in (b"", *self._origins):
            # Browsers preflight a cross-origin PUT (and get no CORS answer); this is for the rest.
            return ERRORS.response(403, "writes come only from Liveboard's own page")
        if not inner:
            # Liveboard's URLs are relative: they need the trailing slash.
            return RedirectResponse(f"/{first}/", status_code=308)
        return {**scope, "path": inner, "raw_path": inner.encode(), "root_path": ""}


class _EventStream(Response):
    """The observer's event stream, passed through chunk by chunk as it arrives.

    Ends when the browser goes away, the observer ends the stream, or the host stops;
    the upstream response is closed in every case, so the observer drops its subscriber.
    """

    def __init__(self, upstream: httpx2.Response, closing: anyio.Event) -> None:
        # Not Response.__init__: it would declare a Content-Length for an empty body.
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"x-accel-buffering", b"no"),
        ]
        self._upstream = upstream
        self._closing = closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async with anyio.create_task_group() as group:

                async def pump() -> None:
                    try:
                        async for chunk in self._upstream.aiter_raw():
                            await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    except httpx2.HTTPError:
                        pass  # the observer went away: end the browser's stream, it reconnects
                    group.cancel_scope.cancel()

                async def until_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()

                async def until_closing() -> None:
                    await self._closing.wait()
                    group.cancel_scope.cancel()

                group.start_soon(pump)
                group.start_soon(until_disconnect)
                group.start_soon(until_closing)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):
                await self._upstream.aclose()


class WatchRoutes:
    def __init__(self, proxy: ObserverProxy, static_dir: Path, origins: set[bytes]) -> None:
        self._proxy = proxy
        self._origins = origins
        self._static_dir = static_dir
        self.closing = anyio.Event()

    async def index(self, request: Request) -> Response:
        return self._file("index.html")

    async def static(self, request: Request) -> Response:
        return self._file(request.path_params["name"])

    def _file(self, name: str) -> Response:
        match = _STATIC_NAME.fullmatch(name)
        if match is None:
            return ERRORS.response(404, "not found")
        try:
            content = (self._static_dir / name).read_bytes()
        except OSError:
            return ERRORS.response(404, "not found")
        return Response(content, media_type=_CONTENT_TYPES[match.group(1)])

    async def read(self, request: Request) -> Response:
        route = request.path_params["route"]
        if not any(pattern.fullmatch(route) for pattern in _READ_ROUTES):
            return ERRORS.response(404, "not found")
        return await self._forward(request, f"/v1/{quote(route)}")

    async def events(self, request: Request) -> Response:
        try:
            upstream = await self._proxy.send(
                "GET", "/v1/events", request.url.query, request.headers, stream=True
            )
        except ObserverUnavailable as exc:
            return ERRORS.response(exc.status_code, exc.message)
        if upstream.status_code != 200:
            try:
                await upstream.aread()
            finally:
                await upstream.aclose()
            return _relay(upstream)
        return _EventStream(upstream, self.closing)

    async def alias(self, request: Request) -> Response:
        agent_id = request.path_params["agent_id"]
        if re.fullmatch(_ID, agent_id) is None:
            return ERRORS.response(404, "not found")
        body = await _json_body(request, MAX_ALIAS_BODY, "the alias")
        if isinstance(body, Response):
            return body
        return await self._forward(request, f"/v1/agents/{quote(agent_id)}/alias", body=body)

    async def steer(self, request: Request) -> Response:
        """A person's keystrokes for a session, or taking it over: from Liveboard's own page
        and this account only, as JSON, bounded."""
        handle, action = request.path_params["handle"], request.path_params["action"]
        if re.fullmatch(_ID, handle) is None or action not in _STEER_ACTIONS:
            return ERRORS.response(404, "not found")
        origin = request.headers.get("origin", "").lower().encode()
        if origin not in self._origins:
            # The page's own Origin, which a browser always sends on a POST, is required.
            return ERRORS.response(403, "typing comes only from Liveboard's own page")
        client, server = request.scope.get("client"), request.scope.get("server")
        if client is None or server is None or peer_uid(tuple(client), tuple(server)) != os.getuid():
            return ERRORS.response(403, "only the account running Zodex Local may type into its sessions")
        body = await _json_body(request, MAX_STEER_BODY, "the input")
        if isinstance(body, Response):
            return body
        return await self._forward(request, f"/v1/sessions/{quote(handle)}/{action}", body=body, steer=True)

    async def _forward(
        self, request: Request, path: str, *, body: bytes | None = None, steer: bool = False
    ) -> Response:
        try:
            upstream = await self._proxy.send(
                request.method, path, request.url.query, request.headers, body=body, steer=steer
            )
        except ObserverUnavailable as exc:
            return ERRORS.response(exc.status_code, exc.message)
        return _relay(upstream)


async def _json_body(request: Request, limit: int, what: str) -> bytes | Response:
    """A JSON request's body of at most ``limit`` bytes, or the refusal to send back."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return ERRORS.response(415, f"send {what} as application/json")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return ERRORS.response(413, f"{what} is too large")
    return body


def _relay(upstream: httpx2.Response) -> Response:
    """Status, content type and body only: no upstream header reaches the browser."""
    media_type = upstream.headers.get("content-type", "application/json")
    return Response(upstream.content, status_code=upstream.status_code, media_type=media_type)


async def _not_found(request: Request, exc: Exception) -> Response:
    # A wrong method on a known path is a 404 too: the viewer exposes nothing beyond its routes.
    return ERRORS.response(404, "not found")


def create_watch_app(
    secret: str, proxy: ObserverProxy, *, port: int, static_dir: Path = STATIC_DIR
) -> tuple[ASGIApp, WatchRoutes]:
    """The app for a host bound to ``127.0.0.1:port``, and its routes (whose ``closing``
    event ends every open event stream when set)."""
    if len(secret) < 32:
        raise ValueError("the viewer's secret must be at least 32 characters")
    routes = WatchRoutes(proxy, static_dir, own_origins(port))
    app = Starlette(
        routes=[
            Route("/", routes.index, methods=["GET"]),
            Route("/static/{name}", routes.static, methods=["GET"]),
            Route("/api/v1/events", routes.events, methods=["GET"]),
            Route("/api/v1/agents/{agent_id}/alias", routes.alias, methods=["PUT"]),
            Route("/api/v1/sessions/{handle}/{action}", routes.steer, methods=["POST"]),
            Route("/api/v1/{route:path}", routes.read, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _not_found},
    )
    # A redirect would point outside the secret prefix: near misses are plain 404s.
    app.router.redirect_slashes = False
    front = guard.ListenerGuard(
        app, name="watch", errors=ERRORS, admit=_SecretPath(secret, port), always=_SECURITY_HEADERS
    )
    return front, routes
