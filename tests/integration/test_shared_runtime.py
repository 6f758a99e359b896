"""Handles route without a session table: across gateways, and across a worker's clean exit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.gate import Gate
from tests.support.gateway import (
    gateway_env,
    http_client,
    pid_alive,
    start_http_gateway,
    stdio_gateway,
    wait_for,
)
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(60)


async def test_second_gateway_continues_a_session(tmp_path: Path) -> None:
    with gateway_env() as genv:
        owner = start_http_gateway(genv)
        try:
            async with http_client(owner.url, {"X-Zodex-Local-Token": owner.token}) as first:
                r = await first.exec("read -r x; echo got $x", str(tmp_path), yield_time_ms=100)
                handle = r["session_handle"]
            [runtime] = genv.runtime_dirs()
            async with stdio_gateway(genv, "--runtime-dir", str(runtime)) as second:
                typed = await second.write(handle, chars="shared\n", yield_time_ms=5000)
                assert "got shared" in typed["output"]
                # Same workdir → the joined gateway reuses the owner's worker.
                again = await second.exec("echo same worker", str(tmp_path))
                assert again["output"] == "same worker\n"
                assert len(list((runtime / "w").glob("*.json"))) == 1
            # The joining gateway leaving does not stop the owner's workers.
            async with http_client(owner.url, {"X-Zodex-Local-Token": owner.token}) as first:
                assert (await first.exec("echo still here", str(tmp_path)))["output"] == "still here\n"
        finally:
            owner.stop()


async def test_tombstones_survive_an_idle_worker_exit(tmp_path: Path) -> None:
    with gateway_env(idle_worker_exit_s=1) as genv:
        async with stdio_gateway(genv) as mcp:
            gate = Gate.make(tmp_path)
            r = await mcp.exec(f"{gate.wait}; exit 5", str(tmp_path), yield_time_ms=50)
            handle = r["session_handle"]
            await gate.release()
            _, final = await mcp.drain(handle)
            assert final["exit_code"] == 5
            [runtime] = genv.runtime_dirs()
            [record_file] = (runtime / "w").glob("*.json")
            record = WorkerRecord.read(record_file)
            assert record is not None
            await wait_for(lambda: not pid_alive(record.pid), timeout=10, what="the idle worker to exit")
            after = await mcp.write(handle, yield_time_ms=50)
            assert after["status"] == "exited"
            assert after["exit_code"] == 5 and after["termination_reason"] == "exit"
            assert after["output"] == ""
            # The workdir still works: a new incarnation starts on demand.
            assert (await mcp.exec("echo fresh", str(tmp_path)))["output"] == "fresh\n"
            assert (await mcp.write(handle, yield_time_ms=50))["exit_code"] == 5
