"""Jobs a command leaves behind keep a handle, are counted on each poll, end with
kill_process, and an eviction that ends them says so (docs/sessions.md#background-processes,
#capacity-and-eviction)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.support.gate import Gate
from tests.support.gateway import gateway_env, pid_alive, stdio_gateway, wait_for
from tests.support.waiting import wait_until
from tests.support.worker_process import running_worker

pytestmark = pytest.mark.timeout(60)

# The job ignores SIGHUP from birth, so the hang-up sent when the shell exits leaves it running.
LEAVE_JOB = "trap '' HUP; sleep {seconds} >/dev/null 2>&1 & echo bg=$!"


def job_pid(result: dict[str, object]) -> int:
    found = re.search(r"bg=(\d+)", str(result["output"]))
    assert found, result
    return int(found.group(1))


async def test_left_behind_job_keeps_a_handle_until_killed(tmp_path: Path) -> None:
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec(LEAVE_JOB.format(seconds=300), str(tmp_path), yield_time_ms=5000)
            bg = job_pid(r)
            assert (r["status"], r["exit_code"], r["termination_reason"]) == ("exited", 0, "exit")
            assert r["background_processes"] == 1
            assert r["summary"].endswith("; 1 background process still running"), r["summary"]
            handle = r["session_handle"]

            polled = await mcp.write(handle, yield_time_ms=50)
            assert polled["status"] == "exited" and polled["exit_code"] == 0
            assert polled["background_processes"] == 1 and polled["session_handle"] == handle

            killed = await mcp.write(handle, kill_process=True)
            assert not pid_alive(bg), "kill_process ends the left-behind job"
            assert killed["background_processes"] == 0 and "session_handle" not in killed
            assert killed["exit_code"] == 0 and killed["termination_reason"] == "exit"
            assert "background" not in killed["summary"], killed["summary"]
            again = await mcp.write(handle, yield_time_ms=50)
            assert again["background_processes"] == 0 and "session_handle" not in again


async def test_a_poll_reports_the_jobs_still_running(tmp_path: Path) -> None:
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec(LEAVE_JOB.format(seconds=0.5), str(tmp_path), yield_time_ms=5000)
            bg = job_pid(r)
            assert r["background_processes"] == 1
            await wait_for(lambda: not pid_alive(bg), what="the job to end by itself")
            polled = await mcp.write(r["session_handle"], yield_time_ms=50)
            assert polled["background_processes"] == 0 and "session_handle" not in polled
            assert polled["summary"] == r["summary"].split(";")[0], polled["summary"]


async def test_eviction_of_a_job_is_reported(tmp_path: Path) -> None:
    with gateway_env(sessions_per_worker=3) as genv:
        async with stdio_gateway(genv) as mcp:
            job = await mcp.exec(LEAVE_JOB.format(seconds=300), str(tmp_path), yield_time_ms=5000)
            bg = job_pid(job)
            gate = Gate.make(tmp_path)
            plain = await mcp.exec(gate.wait, str(tmp_path), yield_time_ms=50)
            await gate.release()
            await mcp.drain(plain["session_handle"])
            running = await mcp.exec("sleep 60", str(tmp_path), yield_time_ms=50)

            # Full: the exited session without jobs goes first, though the job's is older.
            first = await mcp.exec("sleep 60", str(tmp_path), yield_time_ms=50)
            assert first["evicted_session"] == {"session_handle": plain["session_handle"], "cmd": gate.wait}
            assert first["summary"].endswith(f"; evicted {plain['session_handle']} to make room")
            assert pid_alive(bg)

            # Now only the job's session is exited: evicting it ends the job, and says so.
            long_cmd = "echo " + "x" * 300
            second = await mcp.exec(long_cmd, str(tmp_path), yield_time_ms=5000)
            evicted = second["evicted_session"]
            assert evicted == {"session_handle": job["session_handle"], "cmd": evicted["cmd"]}
            assert evicted["cmd"] == LEAVE_JOB.format(seconds=300)
            assert second["summary"] == (
                f"exited 0 after {second['summary'].split('after ')[1].split(';')[0]}; "
                f"evicted {job['session_handle']} to make room"
            )
            await wait_for(lambda: not pid_alive(bg), what="the evicted job to be ended")
            stone = await mcp.write(job["session_handle"], yield_time_ms=50)
            assert stone["status"] == "exited" and stone["background_processes"] == 0
            assert "session_handle" not in stone
            for r in (running, first):
                await mcp.write(r["session_handle"], kill_process=True)


async def test_an_evicted_command_is_cut_in_the_report(tmp_path: Path) -> None:
    with gateway_env(sessions_per_worker=1) as genv:
        async with stdio_gateway(genv) as mcp:
            gate = Gate.make(tmp_path)
            long_cmd = f"{gate.wait}; : " + "y" * 300
            r = await mcp.exec(long_cmd, str(tmp_path), yield_time_ms=50)
            await gate.release()
            await mcp.drain(r["session_handle"])
            after = await mcp.exec("true", str(tmp_path))
            cmd = after["evicted_session"]["cmd"]
            assert len(cmd) == 200 and cmd.endswith("…") and long_cmd.startswith(cmd[:-1])


def test_worker_does_not_idle_out_under_a_left_behind_job() -> None:
    with running_worker({"idle_worker_exit_s": 1}) as worker:
        started = time.monotonic()
        r = worker.dealer().exec(LEAVE_JOB.format(seconds=3), worker.workdir, yield_time_ms=5000)
        bg = job_pid(r)
        worker_seen_alive: list[bool] = []

        def job_gone() -> bool:
            worker_up = worker.process.poll() is None
            job_up = pid_alive(bg)
            if job_up:  # the worker was checked while the job still ran
                worker_seen_alive.append(worker_up)
            return not job_up

        wait_until(job_gone, 15, "the job to end by itself")
        assert time.monotonic() - started >= 2.9, "the job was killed before its 3 s were up"
        assert worker_seen_alive and all(worker_seen_alive), "the worker idled out under a running job"
        assert worker.wait_exit(15) == 0, "it idles out once the job is gone"
