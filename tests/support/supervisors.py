"""A Supervisor on a private runtime, for the tests of the gateway's side of the workers."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from tests.support.gateway import wait_for
from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.supervisor import Supervisor


@contextmanager
def private_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short private root (ipc paths are limited to ~100 characters) holding the runtime
    base and the workdirs; workers started as the gateway would start them by default."""
    path = Path(tempfile.mkdtemp(prefix="zx", dir="/tmp"))
    (path / "run").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path / "run"))
    monkeypatch.delenv("ZODEX_WORKER_ARGV", raising=False)
    monkeypatch.delenv("ZODEX_WORKER_TEMPLATE", raising=False)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def supervising(runtime: Runtime) -> AsyncIterator[Supervisor]:
    supervisor = Supervisor(runtime)
    try:
        yield supervisor
    finally:
        await supervisor.shutdown()
        # Workers that ended before the shutdown are not waited for by it; reaped here, so
        # none is left to the next test's loop.
        await wait_for(
            lambda: not supervisor._children, what="the workers this supervisor started to be reaped"
        )
