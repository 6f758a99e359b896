"""`zodex local stop` kills what a crashed runtime's commands left, even processes that
cleared their environment; `session.cgroups = off` keeps the marker sweep
(docs/sessions.md#process-groups-and-cgroups)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support.cgroups import require_cgroups, tracked_groups
from tests.support.gateway import pid_alive, wait_for
from tests.support.local import connected, local_env
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(90)

ESCAPEES = (
    "(env -u ZODEX_SESSION_HANDLE -u ZODEX_RUNTIME_ID setsid sleep 901 & echo esc=$!); "
    "(env -i setsid sleep 902 & echo clean=$!); echo ready; sleep 300"
)


async def test_stop_after_a_runtime_sigkill_kills_escapees(tmp_path: Path) -> None:
    require_cgroups()
    pids: list[int] = []
    worker_pid = 0
    with local_env() as local, tracked_groups() as groups:
        try:
            local.run("local", "start", str(tmp_path))
            discovery = local.discovery()
            runtime_dir = Path(discovery["runtime_dir"])
            group = groups.track(runtime_dir)
            async with connected(local) as mcp:
                r = await mcp.exec(ESCAPEES, str(tmp_path), yield_time_ms=2000)
            assert "ready" in r["output"], r
            pids = [int(line.split("=")[1]) for line in r["output"].split() if "=" in line]
            assert len(pids) == 2
            (record_file,) = (runtime_dir / "w").glob("*.json")
            record = WorkerRecord.read(record_file)
            assert record is not None
            worker_pid = record.pid
            # A stopped worker cannot clean up when its runtime dies: only `stop` can.
            os.kill(worker_pid, signal.SIGSTOP)
            os.kill(discovery["pid"], signal.SIGKILL)
            await wait_for(lambda: not pid_alive(discovery["pid"]), what="the runtime to die")
            local.run("local", "stop")
            for pid in pids:
                await wait_for(lambda pid=pid: not pid_alive(pid), what=f"stop to kill {pid}")
            assert group is not None and not group.exists(), "stop removes the runtime's cgroups"
        finally:
            for pid in [*pids, worker_pid]:
                if pid and pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)


async def test_the_cgroups_switch_keeps_the_marker_sweep(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "config", "set", "session.cgroups", "off")
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            r = await mcp.exec("echo hi", str(tmp_path))
        assert r["output"] == "hi\n"
        assert not (Path(local.discovery()["runtime_dir"]) / "cgroup").exists()
