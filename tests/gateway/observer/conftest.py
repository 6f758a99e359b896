from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.gateway.observer.observer_support import BASE_URL, BEARER, RUNTIME_ID, T0, Clock, Seeded, seed
from zodex_gateway.history import HistoryStore
from zodex_gateway.observer import create_observer_app


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
def anonymous(store: HistoryStore) -> Iterator[TestClient]:
    app = create_observer_app(store, runtime_id=RUNTIME_ID, bearer_token=BEARER, started_at=T0)
    with TestClient(app, base_url=BASE_URL) as client:
        yield client


@pytest.fixture
def client(anonymous: TestClient) -> TestClient:
    anonymous.headers["Authorization"] = f"Bearer {BEARER}"
    return anonymous
