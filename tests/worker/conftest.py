"""A real worker process for a test module, and a raw DEALER on it for each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.worker_process import RawDealer, WorkerProcess, running_worker
from zodex_protocol import messages


@pytest.fixture(scope="module")
def worker() -> Iterator[WorkerProcess]:
    with running_worker() as w:
        yield w
        if w.process.poll() is None:
            w.dealer().request(messages.SHUTDOWN, {}, timeout=15)


@pytest.fixture
def dealer(worker: WorkerProcess) -> Iterator[RawDealer]:
    d = worker.dealer()
    try:
        yield d
    finally:
        d.socket.close(linger=0)
