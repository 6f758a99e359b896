"""What the Supervisor offers the layers above it, by method: listeners that hear of each
worker before its first use (history's capture subscribes there), and a stop that refuses
new calls at once."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.supervisor import NewWorkerListener, Supervisor
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import worker_id_for
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def supervisor(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Supervisor]:
    root = Path(tempfile.mkdtemp(prefix="zx", dir="/tmp"))  # ipc paths must stay short
    (root / "run").mkdir(mode=0o700)
    (root / "wd").mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(root / "run"))
    monkeypatch.delenv("ZODEX_WORKER_ARGV", raising=False)
    runtime = Runtime.create(state_dir=root / "state", use_cgroups=False)
    supervisor = Supervisor(runtime)
    try:
        yield supervisor
    finally:
        await supervisor.shutdown()
        runtime.release()
        shutil.rmtree(root, ignore_errors=True)


def workdir_of(supervisor: Supervisor) -> str:
    return os.path.realpath(supervisor.runtime.state_dir.parent / "wd")


async def test_every_listener_hears_of_a_new_worker_before_it_is_used(supervisor: Supervisor) -> None:
    heard: list[tuple[str, str, bool]] = []

    def listener(name: str) -> NewWorkerListener:
        async def hear(record: WorkerRecord) -> None:
            heard.append((name, record.worker_id, record.worker_id in supervisor.clients))

        return hear

    supervisor.add_new_worker_listener(listener("capture"))
    supervisor.add_new_worker_listener(listener("another"))
    workdir = workdir_of(supervisor)
    client = await supervisor.worker_for(workdir)
    assert await supervisor.worker_for(workdir) is client
    worker_id = worker_id_for(workdir)
    assert heard == [("capture", worker_id, False), ("another", worker_id, False)], (
        "each listener, in order, once, before the worker is handed out"
    )


async def test_stop_accepting_refuses_new_calls_at_once(supervisor: Supervisor) -> None:
    assert not supervisor.stopping
    supervisor.stop_accepting()
    assert supervisor.stopping
    refusal = "runtime is stopping; new tool calls are not accepted"
    with pytest.raises(ProtocolError) as exec_call:
        await supervisor.worker_for(workdir_of(supervisor))
    with pytest.raises(ProtocolError) as poll:
        await supervisor.route_handle("abcdefg1-0123456789")
    for caught in (exec_call, poll):
        assert (caught.value.code, caught.value.message) == (ErrorCode.STOPPING, refusal)
    assert supervisor.clients == {}, "no worker was started"
