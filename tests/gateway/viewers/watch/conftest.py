"""Fixtures for the watch host on an in-process observer over a seeded history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.observer.observer_support import BEARER, RUNTIME_ID, T0, Clock, Seeded, seed
from tests.gateway.viewers.watch.support import AccessHolder, Observer, RunningHost, running_host, serve_app
from zodex_gateway.history import HistoryStore
from zodex_gateway.observer import create_observer_app
from zodex_gateway.observer.hub import EventHub


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[HistoryStore]:
    with HistoryStore(tmp_path / "history", clock=clock) as opened:
        yield opened


@pytest.fixture
def seeded(store: HistoryStore, clock: Clock) -> Seeded:
    return seed(store, clock)


@pytest.fixture
def observer(store: HistoryStore, seeded: Seeded) -> Iterator[Observer]:
    hub = EventHub()
    bearer = [BEARER]
    app = create_observer_app(
        store, runtime_id=RUNTIME_ID, bearer_token=lambda: bearer[0], started_at=T0, hub=hub, keepalive_s=0.5
    )
    with serve_app(app) as served:
        yield Observer(served, hub, bearer)


@pytest.fixture
def source(observer: Observer) -> AccessHolder:
    return AccessHolder(observer.access())


@pytest.fixture
def host(source: AccessHolder) -> Iterator[RunningHost]:
    with running_host(source) as running:
        yield running
