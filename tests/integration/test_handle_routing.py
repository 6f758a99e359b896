"""*Lost* is only an incarnation the registry recorded as started and that died; a forged
handle with a real worker id and any other incarnation is unknown and names no directory
(docs/sessions.md#handles, #after-exit)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support.gateway import GatewayEnv, gateway_env, pid_alive, stdio_gateway, wait_for
from zodex_protocol.handles import SessionHandle
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(60)


def forged(handle: str, incarnation: int) -> str:
    real = SessionHandle.parse(handle)
    assert real is not None
    return str(SessionHandle(real.worker_id, incarnation, real.token))


def worker_record(genv: GatewayEnv, workdir: Path) -> WorkerRecord:
    [runtime] = genv.runtime_dirs()
    for path in (runtime / "w").glob("*.json"):
        record = WorkerRecord.read(path)
        if record is not None and record.workdir == os.path.realpath(workdir):
            return record
    raise AssertionError(f"no worker record for {workdir}")


async def test_forged_incarnations_are_unknown_and_a_crashed_one_is_lost(tmp_path: Path) -> None:
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec("sleep 60", str(tmp_path), yield_time_ms=50)
            handle = r["session_handle"]
            parsed = SessionHandle.parse(handle)
            assert parsed is not None and parsed.incarnation == 1
            for fake in (forged(handle, 0), forged(handle, 2), forged(handle, 35)):
                text = await mcp.error("write_stdin", session_handle=fake)
                assert text == f"Unknown session handle: {fake}", text

            victim = worker_record(genv, tmp_path)
            os.kill(victim.pid, signal.SIGKILL)
            await wait_for(lambda: not pid_alive(victim.pid), what="the worker to die")
            lost = await mcp.error("write_stdin", session_handle=handle)
            assert lost == (
                f"session {handle} was lost: the worker for {os.path.realpath(tmp_path)} "
                "exited unexpectedly; start the command again"
            )
            # A new incarnation (2) starts; 1 stays lost, 0 and 3 were never started.
            again = await mcp.exec("sleep 60", str(tmp_path), yield_time_ms=50)
            assert worker_record(genv, tmp_path).incarnation == 2
            assert (await mcp.error("write_stdin", session_handle=handle)).startswith(
                f"session {handle} was lost"
            )
            for fake in (forged(handle, 0), forged(handle, 3)):
                text = await mcp.error("write_stdin", session_handle=fake)
                assert text == f"Unknown session handle: {fake}", text
            await mcp.write(again["session_handle"], kill_process=True)


async def test_a_forged_token_on_the_live_incarnation_is_unknown(tmp_path: Path) -> None:
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec("sleep 60", str(tmp_path), yield_time_ms=50)
            real = SessionHandle.parse(r["session_handle"])
            assert real is not None
            fake = str(SessionHandle(real.worker_id, real.incarnation, "0" * 10))
            assert await mcp.error("write_stdin", session_handle=fake) == f"Unknown session handle: {fake}"
            await mcp.write(r["session_handle"], kill_process=True)
