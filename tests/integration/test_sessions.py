"""Session lifecycle (docs/sessions.md): kill, escaped descendants, timeout, tombstones, capacity."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from tests.support.gate import Gate
from tests.support.gateway import CONNECTORS, GatewayEnv, gateway_env, pid_alive, stdio_gateway, wait_for
from tests.support.poll_probe import TYPED, PollProbe
from tests.support.slowdown import scaled

pytestmark = pytest.mark.timeout(120)

# Prints the pids of: the shell's group (sleep in the background), a setsid escapee, and a
# double-forked escapee that the worker inherits as an orphan, which says "ready" last.
SPAWN_FAMILY = (
    "sleep 300 & echo grp=$!; "
    "setsid sleep 301 & echo sid=$!; "
    "( setsid sh -c 'sleep 302 & echo orphan=$! ready; wait' & ); "
    "wait"
)


def pids_in(output: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", output)}


async def test_kill_ends_the_whole_group_and_escapees(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec(SPAWN_FAMILY, str(tmp_path), yield_time_ms=2000)
        out = await mcp.output_until(r["session_handle"], "ready", r["output"])
        pids = pids_in(out)
        assert set(pids) == {"grp", "sid", "orphan"}, out
        assert all(pid_alive(p) for p in pids.values())
        started = time.monotonic()
        killed = await mcp.write(r["session_handle"], kill_process=True, yield_time_ms=50)
        assert time.monotonic() - started < 10
    assert killed["status"] == "exited"
    assert killed["termination_reason"] == "killed"
    assert killed["summary"].startswith("killed after ")
    assert killed["exit_code"] == -1 and killed["signal"] == "SIGTERM"
    for name, pid in pids.items():
        assert not pid_alive(pid), f"{name} ({pid}) survived the kill"


async def test_kill_escalates_to_sigkill(tmp_path: Path) -> None:
    with gateway_env(kill_grace_ms=500) as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec(
                "trap '' TERM; echo stubborn; while :; do sleep 0.05; done", str(tmp_path), yield_time_ms=500
            )
            assert r["output"] == "stubborn\n"
            killed = await mcp.write(r["session_handle"], kill_process=True)
    assert killed["termination_reason"] == "killed"
    assert killed["signal"] == "SIGKILL"


async def test_exited_handle_is_a_tombstone(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        gate = Gate.make(tmp_path)
        r = await mcp.exec(f"{gate.wait}; echo last; exit 4", str(tmp_path), yield_time_ms=50)
        await gate.release()
        out, final = await mcp.drain(r["session_handle"])
        assert out == "last\n" and final["exit_code"] == 4
        again = await mcp.write(r["session_handle"], yield_time_ms=50)
        assert again["status"] == "exited"
        assert again["exit_code"] == 4 and again["termination_reason"] == "exit"
        assert again["output"] == ""
        killed = await mcp.write(r["session_handle"], kill_process=True)
        assert killed["termination_reason"] == "exit", "a kill after exit is a no-op"
        typed = await mcp.write(r["session_handle"], chars="ignored\n", yield_time_ms=50)
        assert typed["status"] == "exited" and typed["output"] == ""


async def test_tombstone_expires(tmp_path: Path) -> None:
    with gateway_env(tombstone_s=1, sessions_per_worker=1) as genv:
        async with stdio_gateway(genv) as mcp:
            gate = Gate.make(tmp_path)
            r = await mcp.exec(gate.wait, str(tmp_path), yield_time_ms=50)
            handle = r["session_handle"]
            await gate.release()
            await mcp.drain(handle)
            # Evicting it (capacity 1) turns it into a tombstone; after 1 s it is gone.
            await mcp.exec("true", str(tmp_path))
            assert (await mcp.write(handle, yield_time_ms=50))["status"] == "exited"
            async with asyncio.timeout(scaled(10)):  # the tombstone lifetime itself is what is tested
                while not (await mcp.call("write_stdin", session_handle=handle)).is_error:
                    await asyncio.sleep(0.1)
            assert (
                await mcp.error("write_stdin", session_handle=handle) == f"Unknown session handle: {handle}"
            )


async def test_timeout_without_polling(tmp_path: Path) -> None:
    with gateway_env(kill_grace_ms=500) as genv:
        async with stdio_gateway(genv) as mcp:
            pid_file = tmp_path / "pid"
            r = await mcp.exec(
                f"echo $$ > {pid_file}.new && mv {pid_file}.new {pid_file}; echo start; exec sleep 30",
                str(tmp_path),
                yield_time_ms=50,
                timeout_ms=1000,
            )
            await wait_for(pid_file.exists, what="the command to write its pid")
            pid = int(pid_file.read_text())
            # Nobody polls: the worker must enforce the timeout on its own.
            await wait_for(lambda: not pid_alive(pid), what="the worker to end the command at its timeout")
            final = await mcp.write(r["session_handle"], yield_time_ms=50)
    assert final["status"] == "exited"
    assert final["termination_reason"] == "timeout"
    assert final["summary"].startswith("timed out after 1.")
    assert "[zodex] command timed out after 1.0s and was terminated" in final["output"]


async def test_timeout_while_polling(tmp_path: Path) -> None:
    with gateway_env(kill_grace_ms=500) as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec("sleep 30", str(tmp_path), yield_time_ms=50, timeout_ms=1000)
            out, final = await mcp.drain(r["session_handle"])
    assert final["termination_reason"] == "timeout"
    assert "command timed out after 1.0s" in out
    assert final["wall_time_ms"] < 5000


async def test_timeout_is_clamped_to_one_second(tmp_path: Path) -> None:
    with gateway_env(kill_grace_ms=500) as genv:
        async with stdio_gateway(genv) as mcp:
            # Far longer than 1 ms, far shorter than the 1 s it is raised to, even on a loaded machine.
            r = await mcp.exec("sleep 0.2; echo survived", str(tmp_path), yield_time_ms=5000, timeout_ms=1)
    assert r["termination_reason"] == "exit"
    assert r["output"] == "survived\n"


async def test_background_process_is_counted_then_killed_by_timeout(tmp_path: Path) -> None:
    with gateway_env(kill_grace_ms=500) as genv:
        async with stdio_gateway(genv) as mcp:
            # The job ignores SIGHUP from birth (ignored signals are inherited), so the hang-up
            # the kernel sends when the shell exits leaves it running: a left-behind job.
            r = await mcp.exec(
                "trap '' HUP; sleep 30 >/dev/null 2>&1 & echo bg=$!",
                str(tmp_path),
                yield_time_ms=5000,
                timeout_ms=1500,
            )
            assert r["status"] == "exited" and r["exit_code"] == 0
            assert r["summary"].endswith("; 1 background process still running"), r["summary"]
            bg = pids_in(r["output"])["bg"]
            assert pid_alive(bg)
            await wait_for(lambda: not pid_alive(bg), timeout=10, what="the session timeout to kill the job")


async def test_capacity_evicts_exited_then_refuses(tmp_path: Path) -> None:
    with gateway_env(sessions_per_worker=3) as genv:
        async with stdio_gateway(genv) as mcp:
            gate = Gate.make(tmp_path)
            done = await mcp.exec(gate.wait, str(tmp_path), yield_time_ms=50)
            await gate.release()
            await mcp.drain(done["session_handle"])
            running = [await mcp.exec("sleep 60", str(tmp_path), yield_time_ms=50) for _ in range(2)]
            # Full (1 exited + 2 running): the exited one is evicted to make room.
            third = await mcp.exec("sleep 60", str(tmp_path), yield_time_ms=50)
            assert third["status"] == "running"
            evicted = await mcp.write(done["session_handle"], yield_time_ms=50)
            assert evicted["status"] == "exited" and evicted["output"] == ""
            marker = tmp_path / "spawned"
            text = await mcp.error("exec_command", cmd=f"touch {marker}", workdir=str(tmp_path))
            assert text == (
                "session capacity reached (3 running sessions); "
                "finish or kill one before starting another command"
            )
            assert not marker.exists(), "nothing is spawned at capacity"
            for r in [*running, third]:
                await mcp.write(r["session_handle"], kill_process=True)
            # Another workdir has its own worker and its own capacity.
            other = tmp_path / "other"
            other.mkdir()
            assert (await mcp.exec("echo ok", str(other)))["output"] == "ok\n"


async def test_calls_on_different_sessions_do_not_wait(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    probes = [PollProbe.make(tmp_path, "a"), PollProbe.make(tmp_path, "b")]
    async with connect(genv) as mcp:
        long = [
            await mcp.exec(probe.command, str(d), yield_time_ms=50)
            for probe, d in zip(probes, [a, b], strict=True)
        ]
        for r in long:
            await mcp.output_until(r["session_handle"], "ready", r["output"])
        polls = [
            asyncio.create_task(mcp.write(r["session_handle"], chars=TYPED, yield_time_ms=30000))
            for r in long
        ]
        for probe in probes:
            await wait_for(probe.reached, what=f"the poll to reach its worker ({probe.marker.name})")
        started = time.monotonic()
        quick = await asyncio.gather(*(mcp.exec(f"echo {i}", str(d)) for i, d in enumerate([a, b, a, b])))
        quick_time = time.monotonic() - started
        assert not any(p.done() for p in polls), "the long polls were waiting in their workers all along"
        for probe in probes:
            probe.release()
        released = await asyncio.gather(*polls)
    assert [q["output"] for q in quick] == ["0\n", "1\n", "2\n", "3\n"]
    assert quick_time < 2.5, "calls must not queue behind a long poll"
    assert [r["output"] for r in released] == ["released\n", "released\n"]


async def test_calls_on_one_session_are_serialised(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    gate = Gate.make(tmp_path)
    async with connect(genv) as mcp:
        r = await mcp.exec(
            f"for i in 1 2 3 4 5 6; do echo line$i; sleep 0.1; done; {gate.wait}",
            str(tmp_path),
            yield_time_ms=50,
        )
        handle = r["session_handle"]
        results = await asyncio.gather(*(mcp.write(handle, yield_time_ms=2000) for _ in range(4)))
        out = r["output"] + "".join(x["output"] for x in results)
        await gate.release()
        rest, _ = await mcp.drain(handle)
    lines = (out + rest).split()
    assert lines == [f"line{i}" for i in range(1, 7)], "no output lost or repeated across concurrent polls"


def test_transports_registered() -> None:
    assert sorted(CONNECTORS) == ["http", "stdio"]
