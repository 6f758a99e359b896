"""Fixtures of the tests of the gateway's side of the workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.supervisors import private_root


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short private root holding the runtime base and the workdirs."""
    with private_root(monkeypatch) as path:
        yield path
