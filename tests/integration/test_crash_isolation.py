"""A worker crash loses only its own sessions; the gateway survives and respawns (docs/architecture.md#supervisor)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.gateway import GatewayEnv, gateway_env, pid_alive, stdio_gateway, wait_for
from tests.support.poll_probe import TYPED, PollProbe
from zodex_gateway.workers.supervisor import lost_message
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(120)


def records(genv: GatewayEnv) -> dict[str, WorkerRecord]:
    found = {}
    for runtime in genv.runtime_dirs():
        for path in (runtime / "w").glob("*.json"):
            record = WorkerRecord.read(path)
            if record is not None:
                found[record.workdir] = record
    return found


async def test_sigkill_worker_loses_only_its_sessions(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    doomed_dir = tmp_path / "doomed"
    safe_dir = tmp_path / "safe"
    doomed_dir.mkdir()
    safe_dir.mkdir()
    # The trap makes the doomed loop outlive the PTY hang-up: the gateway must end it.
    stream = "trap '' HUP; i=0; while :; do i=$((i+1)); echo tick $i 2>/dev/null; sleep 0.05; done"
    async with connect(genv) as mcp:
        doomed = await mcp.exec(stream, str(doomed_dir), yield_time_ms=300)
        safe = await mcp.exec(stream, str(safe_dir), yield_time_ms=300)
        for started in (doomed, safe):  # both stream (a loaded machine may take a while to start them)
            await mcp.output_until(started["session_handle"], "tick 1", started["output"])
        victim = records(genv)[os.path.realpath(doomed_dir)]
        doomed_shell = next(
            p.pid
            for p in psutil.Process(victim.pid).children()
            if p.environ().get("ZODEX_SESSION_HANDLE") == doomed["session_handle"]
        )
        os.kill(victim.pid, signal.SIGKILL)
        await wait_for(lambda: not pid_alive(victim.pid), what="the worker to die")

        handle = doomed["session_handle"]
        lost = await mcp.error("write_stdin", session_handle=handle)
        assert lost == (
            f"session {handle} was lost: the worker for {os.path.realpath(doomed_dir)} "
            "exited unexpectedly; start the command again"
        )
        # The other workdir's session never noticed.
        polled = await mcp.write(safe["session_handle"], yield_time_ms=500)
        assert polled["status"] == "running" and "tick" in polled["output"]
        # The crashed workdir works again, with a fresh incarnation.
        again = await mcp.exec("echo back", str(doomed_dir))
        assert again["output"] == "back\n"
        assert records(genv)[os.path.realpath(doomed_dir)].incarnation == victim.incarnation + 1
        # Old handles stay lost, even with the new incarnation running.
        assert (await mcp.error("write_stdin", session_handle=handle)).startswith(
            f"session {handle} was lost"
        )
        polled = await mcp.write(safe["session_handle"], yield_time_ms=300)
        assert "tick" in polled["output"]
        await mcp.write(safe["session_handle"], kill_process=True)
    await wait_for(lambda: not pid_alive(doomed_shell), what="the lost session's command to be killed")


async def test_worker_killed_during_a_call(genv: GatewayEnv, tmp_path: Path) -> None:
    probe = PollProbe.make(genv.root)
    async with stdio_gateway(genv) as mcp:
        started = await mcp.exec(probe.command, str(tmp_path), yield_time_ms=50)
        handle = started["session_handle"]
        await mcp.output_until(handle, "ready", started["output"])
        victim = records(genv)[os.path.realpath(tmp_path)]
        poll = asyncio.create_task(
            mcp.call("write_stdin", session_handle=handle, chars=TYPED, yield_time_ms=30000)
        )
        # The poll is waiting in the worker when it dies: its death is the event under test.
        await wait_for(probe.reached, what="the poll to reach the worker")
        os.kill(victim.pid, signal.SIGKILL)
        result = await asyncio.wait_for(poll, 10)
        assert result.is_error
        assert result.content[0].text == lost_message(handle, os.path.realpath(tmp_path))
        assert (await mcp.exec("echo alive", str(tmp_path)))["output"] == "alive\n"


def crashing_worker(tmp: Path) -> str:
    script = tmp / "crash_worker.py"
    script.write_text("import sys\nsys.stderr.write('simulated start-up crash\\n')\nsys.exit(3)\n")
    return json.dumps([sys.executable, str(script)])


async def test_crash_loop_gives_a_clear_error(tmp_path: Path) -> None:
    with gateway_env() as genv:
        genv.extra["ZODEX_WORKER_ARGV"] = crashing_worker(genv.root)
        async with stdio_gateway(genv) as mcp:
            first = await mcp.error("exec_command", cmd="true", workdir=str(tmp_path))
            assert first == (
                f"could not start a worker for {os.path.realpath(tmp_path)}: it exited during start-up "
                "(status 3); check the gateway log and retry"
            )
            for _ in range(2):
                await mcp.error("exec_command", cmd="true", workdir=str(tmp_path))
            gave_up = await mcp.error("exec_command", cmd="true", workdir=str(tmp_path))
            assert gave_up.startswith(f"the worker for {os.path.realpath(tmp_path)} crashed 3 times in 60s")
            assert "not restarting it" in gave_up
            # The gateway itself is fine.
            listed = await mcp.client.list_tools()
            assert len(listed.tools) == 4


async def test_hung_worker_is_detected_by_health_pings(tmp_path: Path) -> None:
    hung_dir, other_dir = tmp_path / "hung", tmp_path / "other"
    hung_dir.mkdir()
    other_dir.mkdir()
    with gateway_env(health_interval_ms=300) as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec("sleep 60", str(hung_dir), yield_time_ms=50)
            await mcp.exec("true", str(other_dir))
            victim = records(genv)[os.path.realpath(hung_dir)]
            os.kill(victim.pid, signal.SIGSTOP)  # alive, but answers nothing
            try:
                text = await mcp.error("write_stdin", session_handle=r["session_handle"], yield_time_ms=50)
            finally:
                if pid_alive(victim.pid):
                    os.kill(victim.pid, signal.SIGCONT)
            assert "was lost" in text
            await wait_for(lambda: not pid_alive(victim.pid), what="the hung worker to be killed")
            assert (await mcp.exec("echo ok", str(other_dir)))["output"] == "ok\n"
            assert (await mcp.exec("echo back", str(hung_dir)))["output"] == "back\n"
