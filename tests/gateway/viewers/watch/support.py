"""Serving apps for the watch tests: an in-process observer and a watch host, each on its
own loop in a thread, reached over real loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import uvicorn

from tests.gateway.observer.observer_support import RUNTIME_ID
from tests.support.waiting import wait_until
from zodex_gateway.local.observer_access import ObserverAccess
from zodex_gateway.observer.hub import EventHub
from zodex_gateway.viewers.watch import WatchHost

LIVEBOARD_LINE = re.compile(r"Liveboard: (http://127\.0\.0\.1:(\d+)/([A-Za-z0-9_-]{32,})/)")


@dataclass
class ServedApp:
    base_url: str
    port: int
    loop: asyncio.AbstractEventLoop
    stop: Callable[[], None]


@contextlib.contextmanager
def serve_app(app: Any) -> Iterator[ServedApp]:
    """``app`` under uvicorn on 127.0.0.1:<random>, on a thread of its own."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", ws="none"))
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        loops.append(asyncio.get_running_loop())
        await server.serve(sockets=[sock])

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    wait_until(lambda: server.started, what="the test server to start")

    def stop() -> None:
        server.should_exit = True
        server.force_exit = True  # open event streams must not hold the test up
        thread.join(15)

    try:
        yield ServedApp(f"http://127.0.0.1:{port}", port, loops[0], stop)
    finally:
        stop()
        sock.close()


@dataclass
class AccessHolder:
    """What the watch host reads as "discovery + bearer file"; tests change it mid-run."""

    access: ObserverAccess | None
    reads: int = 0
    error: Exception | None = field(default=None)

    def __call__(self) -> ObserverAccess:
        self.reads += 1
        if self.error is not None:
            raise self.error
        assert self.access is not None
        return self.access


@dataclass
class RunningHost:
    host: WatchHost
    thread: threading.Thread
    loop: asyncio.AbstractEventLoop
    stop_event: asyncio.Event

    @property
    def url(self) -> str:
        return self.host.url

    def client(self, **kwargs: Any) -> httpx2.Client:
        return httpx2.Client(base_url=self.url, trust_env=False, timeout=15, **kwargs)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(15)
        assert not self.thread.is_alive(), "the watch host did not stop"


@contextlib.contextmanager
def running_host(source: Callable[[], ObserverAccess]) -> Iterator[RunningHost]:
    host = WatchHost(source)
    ready: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def main() -> None:
        stop = asyncio.Event()
        ready.append((asyncio.get_running_loop(), stop))
        await host.serve(stop)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    wait_until(lambda: bool(ready), what="the watch host to start")
    loop, stop_event = ready[0]
    running = RunningHost(host, thread, loop, stop_event)
    try:
        yield running
    finally:
        if thread.is_alive():
            running.stop()


def sse_frames(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """Server-sent event frames (``id``/``data`` fields) from a stream's lines."""
    frame: dict[str, str] = {}
    for line in lines:
        if line == "":
            if frame:
                yield frame
            frame = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            frame[name] = value.removeprefix(" ")


class Observer:
    def __init__(self, served: ServedApp, hub: EventHub, bearer: list[str]) -> None:
        self.served = served
        self.hub = hub
        self.bearer = bearer  # [current]: the observer re-reads it per request, like its file

    def access(self) -> ObserverAccess:
        return ObserverAccess(self.served.base_url, self.bearer[0], RUNTIME_ID)

    def publish(self, event_type: str, payload: dict[str, object], **keys: str | None) -> None:
        self.served.loop.call_soon_threadsafe(lambda: self.hub.publish(event_type, payload, **keys))
