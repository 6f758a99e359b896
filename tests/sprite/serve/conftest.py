"""The root helper's fixtures: a throwaway agent account, a directory every account can
read, and a running helper that must stop cleanly, leaving no process of the agent."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sprite.serve.helper_support import HelperProcess
from tests.support.accounts import Account, processes_of, require_root, throwaway_account


@pytest.fixture(scope="module")
def agent() -> Iterator[Account]:
    require_root()
    with throwaway_account("za") as account:
        yield account


@pytest.fixture
def base() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="zodex-helper-") as directory:
        os.chmod(directory, 0o755)
        yield Path(directory)


@pytest.fixture
def helper(agent: Account, base: Path) -> Iterator[HelperProcess]:
    running = HelperProcess(agent, base)
    try:
        yield running
        running.barrier()
        assert running.process.poll() is None, "the helper kept serving"
    finally:
        assert running.stop() == 0, running.stderr()
        assert processes_of(agent.uid) == [], "stopping the helper leaves no process of the agent"
