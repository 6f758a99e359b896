"""An observer API served for real (uvicorn on a loopback port, in a thread) over a seeded
history, with an event hub the test can publish into."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from tests.gateway.observer.observer_support import BEARER, RUNTIME_ID, T0, Clock, Seeded, seed
from zodex_gateway.history import HistoryStore
from zodex_gateway.local.observer_access import ObserverAccess
from zodex_gateway.observer import create_observer_app
from zodex_gateway.observer.hub import EventHub


@dataclass
class Served:
    access: ObserverAccess
    store: HistoryStore
    clock: Clock
    seeded: Seeded
    hub: EventHub | None
    loop: asyncio.AbstractEventLoop  # the server's: the hub is used on it only

    def publish(self, event_type: str, payload: dict[str, Any], **keys: str | None) -> None:
        hub = self.hub
        assert hub is not None, "this observer was served without a hub"
        self.loop.call_soon_threadsafe(lambda: hub.publish(event_type, payload, **keys))


@contextmanager
def _serve(store: HistoryStore, hub: EventHub | None) -> Iterator[tuple[str, asyncio.AbstractEventLoop]]:
    app = create_observer_app(store, runtime_id=RUNTIME_ID, bearer_token=BEARER, started_at=T0, hub=hub)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    started = threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        loops.append(asyncio.get_running_loop())
        started.set()
        await server.serve(sockets=[sock])

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="observer", daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield f"http://127.0.0.1:{port}", loops[0]
    finally:
        if hub is not None:
            loops[0].call_soon_threadsafe(hub.close)  # open event streams would hold the shutdown
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    """A seeded observer; ``@pytest.mark.parametrize("served", [False], indirect=True)``
    serves it without ``/v1/events``."""
    with_hub = getattr(request, "param", True)
    clock = Clock()
    with HistoryStore(tmp_path / "history", clock=clock) as store:
        seeded = seed(store, clock)
        hub = EventHub() if with_hub else None
        with _serve(store, hub) as (base_url, loop):
            yield Served(ObserverAccess(base_url, BEARER, RUNTIME_ID), store, clock, seeded, hub, loop)
