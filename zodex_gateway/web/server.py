"""Serving ASGI apps on listening sockets, under the listener limits
(docs/modes.md#http-listeners): one socket builder and one uvicorn setup for every
listener — MCP, the observer API and the watch host."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from typing import Any, Literal

import uvicorn
from starlette.types import ASGIApp

from zodex_gateway.web.listener_limits import ListenerLimits, SlowClients
from zodex_system import descriptor_limit

BACKLOG = 128


def listen(host: str, port: int) -> socket.socket:
    """Bind and listen before serving, so the port (possibly 0 → random) is known and
    connections queue from the first instant."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets whose proto says
    # TCP, and without it a response's headers and body meet Nagle and delayed ACKs (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def base_url(sock: socket.socket) -> str:
    """``http://<host>:<port>`` of a listening socket (IPv6 literals in brackets)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    return f"http://{shown}:{port}"


def web_server(app: Any, slow_clients: SlowClients, **options: Any) -> uvicorn.Server:
    """A uvicorn server for ``app`` whose connections ``slow_clients`` watches. The caller
    owns SIGTERM/SIGINT (uvicorn's handlers would re-raise them after exit)."""
    config = uvicorn.Config(
        app,
        http=slow_clients.protocol,
        ws="none",
        log_level="warning",
        access_log=False,
        **options,
    )
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    return server


class Listeners:
    """The HTTP listeners of one process, served together in its event loop.

    Made when the process starts listening: it raises the soft descriptor limit to the hard
    one, and every listener shares one budget of slow clients (descriptors are the
    process's). Each socket is closed when :meth:`serve` returns.
    """

    def __init__(self, limits: ListenerLimits, *, lifespan: Literal["on", "off"], graceful_s: int) -> None:
        descriptor_limit.raise_to_hard_limit()
        self._slow_clients = SlowClients(limits)
        self._lifespan = lifespan
        self._graceful_s = graceful_s
        self._served: list[tuple[uvicorn.Server, socket.socket]] = []

    def add(self, app: ASGIApp, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        """Serve ``app`` on ``sock``; with ``tls``, HTTPS (a context loaded beforehand, so the
        certificate's key may be one this process can no longer read)."""
        server = web_server(
            app, self._slow_clients, lifespan=self._lifespan, timeout_graceful_shutdown=self._graceful_s
        )
        if tls is not None:
            server.config.load()
            server.config.ssl = tls
        self._served.append((server, sock))

    def stop(self) -> None:
        """Begin a graceful exit: stop accepting, let requests in progress finish."""
        for server, _sock in self._served:
            server.should_exit = True

    async def serve(self) -> None:
        try:
            await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in self._served))
        finally:
            for _server, sock in self._served:
                with contextlib.suppress(OSError):
                    sock.close()
