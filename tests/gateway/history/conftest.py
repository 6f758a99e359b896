from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.history.history_support import Clock
from zodex_gateway.history import HistoryStore


@pytest.fixture
def history_dir(tmp_path: Path) -> Path:
    return tmp_path / "state" / "history"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(history_dir: Path, clock: Clock) -> Iterator[HistoryStore]:
    with HistoryStore(history_dir, clock=clock) as opened:
        yield opened
