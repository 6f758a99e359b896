"""The dispatcher's in-process twin for the MCP layer's tests: real PTYs, no worker processes.

Its reaper handles SIGCHLD with ``waitpid(-1)`` in this process, so each test closes it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.in_process import InProcessDispatcher
from tests.support.tool_calls import FailingDispatcher
from zodex_protocol.limits import Limits

SHELL = ["/bin/bash", "-c"]


@pytest.fixture
async def twin(tmp_path: Path) -> AsyncIterator[InProcessDispatcher]:
    dispatcher = InProcessDispatcher(Limits(), tmp_path / "spill", SHELL)
    try:
        yield dispatcher
    finally:
        await dispatcher.close()


@pytest.fixture
async def failing_twin(tmp_path: Path) -> AsyncIterator[InProcessDispatcher]:
    """A twin whose ``exec_command`` raises."""
    dispatcher = FailingDispatcher(Limits(), tmp_path / "spill", SHELL)
    try:
        yield dispatcher
    finally:
        await dispatcher.close()
