"""Slow clients against a real uvicorn listener (docs/modes.md#http-listeners): the header
deadline, the cap on connections still sending headers (the oldest goes), a kept-alive
connection waiting again after its response, and the cap following the descriptor limit."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from tests.support.gateway import wait_for
from zodex_gateway.web.listener_limits import ListenerLimits, SlowClients, pending_cap
from zodex_gateway.web.server import web_server

pytestmark = pytest.mark.timeout(60)


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def listening(limits: ListenerLimits) -> AsyncIterator[tuple[int, SlowClients]]:
    slow = SlowClients(limits)
    server = web_server(hello, slow, lifespan="off", timeout_graceful_shutdown=1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await wait_for(lambda: server.started, what="the server to start")
    try:
        yield sock.getsockname()[1], slow
    finally:
        server.should_exit = True
        await task
        sock.close()


def half_request(port: int) -> socket.socket:
    """A connection that sends one header line and then nothing."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
    conn.setblocking(False)
    return conn


def closed_by_server(conn: socket.socket) -> bool:
    try:
        return conn.recv(4096) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


async def get(port: int) -> httpx2.Response:
    async with httpx2.AsyncClient(trust_env=False, timeout=5) as client:
        return await client.get(f"http://127.0.0.1:{port}/")


async def test_a_connection_that_never_finishes_its_headers_is_closed_at_the_deadline() -> None:
    async with listening(ListenerLimits(header_timeout_s=0.3)) as (port, slow):
        conn = half_request(port)
        await wait_for(lambda: len(slow) == 1, what="the connection to wait for headers")
        await wait_for(lambda: closed_by_server(conn), timeout=5, what="the server to close it")
        assert len(slow) == 0
        assert (await get(port)).text == "ok", "the listener still serves"
        conn.close()


async def test_at_the_cap_the_oldest_waiting_connection_is_closed() -> None:
    async with listening(ListenerLimits(header_timeout_s=30, max_pending=4)) as (port, slow):
        conns = []
        for n in range(4):
            conns.append(half_request(port))
            await wait_for(lambda n=n: len(slow) == n + 1, what=f"connection {n} accepted")
        assert not any(closed_by_server(c) for c in conns)
        conns.append(half_request(port))
        await wait_for(lambda: closed_by_server(conns[0]), what="the oldest to be closed")
        await wait_for(lambda: len(slow) == 4, what="the newest to wait in its place")
        assert not any(closed_by_server(c) for c in conns[1:]), "only the oldest went"
        assert (await get(port)).text == "ok", "a real client still gets through at the cap"
        for conn in conns:
            conn.close()


async def test_a_kept_alive_connection_waits_for_headers_again_after_its_response() -> None:
    async with listening(ListenerLimits(header_timeout_s=0.5)) as (port, slow):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        reply = b""
        while not reply.endswith(b"ok"):
            reply += await asyncio.to_thread(conn.recv, 4096)
        assert reply.startswith(b"HTTP/1.1 200")
        await wait_for(lambda: len(slow) == 1, what="the kept-alive connection to wait again")
        conn.sendall(b"GET / HTTP/1.1\r\n")  # the next request, started and never finished
        conn.setblocking(False)
        await wait_for(lambda: closed_by_server(conn), timeout=5, what="the idle connection closed")
        conn.close()


async def test_a_request_in_progress_is_not_closed_by_the_deadline() -> None:
    async def slow_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await asyncio.sleep(0.6)  # a long tool call: longer than the header deadline
            await hello(scope, receive, send)

    slow = SlowClients(ListenerLimits(header_timeout_s=0.2))
    server = web_server(slow_app, slow, lifespan="off", timeout_graceful_shutdown=1)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await wait_for(lambda: server.started, what="the server to start")
        assert (await get(sock.getsockname()[1])).text == "ok"
    finally:
        server.should_exit = True
        await task
        sock.close()


def test_the_cap_is_at_most_a_quarter_of_the_descriptor_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert pending_cap(256) == 64
        assert pending_cap(10) == 10
        resource.setrlimit(resource.RLIMIT_NOFILE, (20, hard))
        assert pending_cap(256) == 8, "never below a floor that lets a real client in"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_uvicorn_hooks_zodex_relies_on_are_there() -> None:
    """pyproject.toml caps uvicorn at the tested minor because Zodex subclasses its
    H11Protocol and replaces Server.capture_signals: a release that moves either fails here."""
    import inspect

    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from zodex_gateway.web.listener_limits import HeaderDeadlineProtocol

    assert issubclass(HeaderDeadlineProtocol, H11Protocol)
    for hook in ("connection_made", "connection_lost", "handle_events", "on_response_complete"):
        assert callable(getattr(H11Protocol, hook, None)), hook
    capture = getattr(uvicorn.Server, "capture_signals", None)
    assert capture is not None and inspect.isfunction(capture), (
        "Server.capture_signals is what Zodex replaces"
    )
