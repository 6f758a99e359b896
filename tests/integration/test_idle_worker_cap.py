"""At most ``worker.max-idle`` idle workers per gateway: beyond it the least recently used
idle one stops, leaving its tombstones, while a worker running a command is never stopped
(docs/sessions.md#idle-workers). Scaled down to a cap of 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_handle_routing import worker_record
from tests.support.gate import Gate
from tests.support.gateway import gateway_env, pid_alive, stdio_gateway, wait_for

pytestmark = pytest.mark.timeout(90)


async def test_the_least_recently_used_idle_worker_beyond_the_cap_stops(tmp_path: Path) -> None:
    dirs = {name: tmp_path / name for name in "abcde"}
    for path in dirs.values():
        path.mkdir()
    with gateway_env(max_idle_workers=2) as genv:
        async with stdio_gateway(genv) as mcp:
            busy = await mcp.exec("sleep 60", str(dirs["a"]), yield_time_ms=50)
            assert busy["status"] == "running"
            # b's command ends, but its handle stays: it must still answer once b is stopped.
            gate = Gate.make(tmp_path)
            first = await mcp.exec(f"{gate.wait}; echo from-b", str(dirs["b"]), yield_time_ms=50)
            await gate.release()
            output, ended = await mcp.drain(first["session_handle"])
            assert ended["status"] == "exited" and "from-b" in first["output"] + output
            for name in "cd":
                await mcp.exec("true", str(dirs[name]))
            records = {name: worker_record(genv, path) for name, path in dirs.items() if name != "e"}
            # A fifth worker: four others, three of them idle, one over the cap of two.
            await mcp.exec("true", str(dirs["e"]))
            stopped = records["b"]
            await wait_for(lambda: not pid_alive(stopped.pid), what="the oldest idle worker to stop")
            exit_file = genv.runtime_dirs()[0] / "w" / f"{stopped.worker_id}-{stopped.incarnation}.exit"
            assert exit_file.is_file(), "it stopped cleanly, leaving its tombstones"
            for name in "acd":
                assert pid_alive(records[name].pid), f"the worker for {name} was kept"
            # The busy worker's command still runs; the stopped worker's handle answers.
            assert (await mcp.write(busy["session_handle"], yield_time_ms=50))["status"] == "running"
            again = await mcp.write(first["session_handle"], yield_time_ms=50)
            assert again["status"] == "exited" and again["exit_code"] == 0
            # Its workdir gets a new worker when used again, and c (now the oldest idle) goes.
            rerun = await mcp.exec("echo back", str(dirs["b"]))
            assert rerun["output"] == "back\n"
            assert worker_record(genv, dirs["b"]).incarnation == stopped.incarnation + 1
            await wait_for(
                lambda: not pid_alive(records["c"].pid), what="the next oldest idle worker to stop"
            )
            assert pid_alive(records["a"].pid) and pid_alive(records["d"].pid)
