"""What a real Local runtime writes to runtime.log (docs/modes.md#logs): a line per tool call
with its agent, tool, workdir, session, outcome and duration, worker starts and crashes
with their reason — never a command, what it was typed or what it printed; and
`zodex local logs --follow` printing lines as they are written."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.local.test_agents_and_history import call
from tests.support.local import ZODEX, LocalEnv, connected, local_env
from tests.support.slowdown import scaled
from tests.support.waiting import wait_for_value
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(90)

SECRET = "sk-live-9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f"


def log_path(local: LocalEnv) -> Path:
    return local.root / "state" / "zodex" / "local" / "logs" / "runtime.log"


def call_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if " zodex.calls INFO call " in line]


def the_worker(local: LocalEnv) -> WorkerRecord:
    (record_file,) = (Path(local.discovery()["runtime_dir"]) / "w").glob("*.json")
    record = WorkerRecord.read(record_file)
    assert record is not None
    return record


async def test_calls_workers_and_crashes_are_logged_without_commands_or_output(tmp_path: Path) -> None:
    workdir = str(tmp_path)
    with local_env() as local:
        local.run("local", "start", workdir)
        async with connected(local) as mcp:
            ok = await call(mcp, "conv-log", "exec_command", cmd=f"echo {SECRET}", workdir=workdir)
            assert SECRET in ok.structured_content["output"]
            typed = await call(mcp, "conv-log", "exec_command", cmd="cat", workdir=workdir, yield_time_ms=100)
            cat = typed.structured_content["session_handle"]
            await call(mcp, "conv-log", "write_stdin", session_handle=cat, chars=f"{SECRET}\n\u0004")
            patch = f"*** Begin Patch\n*** Add File: s.txt\n+{SECRET}\n*** End Patch"
            assert not (await call(mcp, "conv-log", "apply_patch", patch=patch, workdir=workdir)).is_error
            assert not (await call(mcp, "conv-log", "set_agent_alias", alias="log reader")).is_error
            bad = await call(mcp, "conv-log", "write_stdin", session_handle="w-nope")
            assert bad.is_error
            running = await call(
                mcp, "conv-log", "exec_command", cmd="sleep 30", workdir=workdir, yield_time_ms=50
            )
            handle = running.structured_content["session_handle"]
            worker = the_worker(local)
            os.kill(worker.pid, signal.SIGKILL)
            crash = wait_for_value(
                lambda: next(
                    (ln for ln in log_path(local).read_text().splitlines() if "crashed" in ln), None
                ),
                what="the crash in runtime.log",
            )
            lost = await call(mcp, "conv-log", "write_stdin", session_handle=handle)
            assert lost.is_error and "was lost" in lost.content[0].text

        shown = local.run("local", "logs", "--lines", "200").stdout
        # The worker's start and its crash, with the reason.
        assert f"worker for {workdir} started (pid {worker.pid}, incarnation {worker.incarnation})" in shown
        assert crash in shown
        assert re.search(
            rf"ERROR worker for {re.escape(workdir)} \(pid {worker.pid}, incarnation {worker.incarnation}\) "
            r"crashed: killed by SIGKILL; its sessions are lost",
            crash,
        ), crash
        # One line per call, in order, each with its fields.
        lines = call_lines(shown)
        agent = local.run("local", "history", "--format", "json").stdout.split('"agent_id": "')[1][:4]
        expected = [
            ("exec_command", agent, workdir, "ok"),
            ("exec_command", agent, workdir, "running"),
            ("write_stdin", agent, "-", "ok"),
            ("apply_patch", agent, workdir, "ok"),
            ("set_agent_alias", agent, "-", "ok"),
            ("write_stdin", agent, "-", "error"),
            ("exec_command", agent, workdir, "running"),
            ("write_stdin", agent, "-", "error"),
        ]
        assert len(lines) == len(expected), lines
        for line, (tool, who, where, outcome) in zip(lines, expected, strict=True):
            match = re.search(
                r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} zodex\.calls INFO call (\S+) agent=(\S+) "
                r"(?:alias=\"[^\"]*\" )?workdir=(\S+) session=(\S+) outcome=(\S+) .*duration_ms=\d+$",
                line,
            )
            assert match, line
            assert (*match.groups()[:3], match[5]) == (tool, who, where, outcome), line
        assert f"session={cat} " in lines[1] and f"session={handle} " in lines[6]
        assert 'error="Unknown session handle: w-nope"' in lines[5]
        assert f'error="session {handle} was lost' in lines[7]
        assert all(' alias="log reader" ' in line for line in lines[5:]), "the label once it is set"
        assert "exit_code=0" in lines[0]

        local.run("local", "stop")
        log = log_path(local).read_text()
        assert SECRET not in log and SECRET[:12] not in log
        assert "echo" not in log and "cat\n" not in log


def read_until(stream: int, marker: str, seen: list[str], timeout: float = 15.0) -> None:
    """Read ``stream`` (non-blocking) until ``marker`` appears in what was read, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while marker not in "".join(seen):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"{marker!r} not printed within {timeout}s; got {''.join(seen)!r}")
        readable, _, _ = select.select([stream], [], [], remaining)
        if readable:
            chunk = os.read(stream, 65536)
            if not chunk:
                raise AssertionError(f"ended before printing {marker!r}; got {''.join(seen)!r}")
            seen.append(chunk.decode())


async def test_follow_prints_lines_written_after_it_started_and_ctrl_c_ends_it(tmp_path: Path) -> None:
    workdir = str(tmp_path)
    with local_env() as local:
        local.run("local", "start", workdir)
        runtime_id = local.discovery()["runtime_id"]
        # Started with SIGINT ignored, as a background job of a script starts it: Ctrl-C
        # still ends it.
        ignoring = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])"
        with subprocess.Popen(
            [sys.executable, "-c", ignoring, ZODEX, "local", "logs", "--follow", "--lines", "5"],
            env=local.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as follower:
            try:
                assert follower.stdout is not None and follower.stderr is not None
                out = follower.stdout.fileno()
                seen: list[str] = []
                read_until(out, f"runtime {runtime_id} serving", seen)
                async with connected(local) as mcp:
                    await mcp.exec("true", workdir)
                read_until(out, "call exec_command", seen)
                # A restart appends to the same log; following goes on.
                local.run("local", "stop")
                local.run("local", "start", workdir)
                read_until(out, f"runtime {local.discovery()['runtime_id']} serving", seen)
                follower.send_signal(signal.SIGINT)
                assert follower.wait(scaled(10)) == 0
                assert follower.stderr.read() == b""
            finally:
                if follower.poll() is None:
                    follower.kill()


def test_follow_without_a_log_directory_is_one_clear_error(tmp_path: Path) -> None:
    with local_env() as local:
        done = local.run("local", "logs", "--follow", check=False)
        assert done.returncode == 1
        assert done.stderr.startswith("error: cannot follow ") and done.stderr.count("\n") == 1
        assert not (local.root / "state").exists(), "nothing was made"


async def test_the_runtime_log_rotates_at_log_max_size(tmp_path: Path) -> None:
    """`log.max-size` and `log.keep` from local.toml: twenty calls in workdirs with
    3,800-character names write more than 64 KiB of log lines."""
    with local_env() as local:
        local.run("local", "config", "set", "log.max-size", "64kb")
        local.run("local", "config", "set", "log.keep", "2")
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            for n in range(20):
                workdir = tmp_path.joinpath(*(["d" * 250] * 15), f"w{n}")
                workdir.mkdir(parents=True)
                done = await call(mcp, "conv-rotate", "exec_command", cmd="true", workdir=str(workdir))
                assert not done.is_error
        logs = log_path(local).parent
        assert (logs / "runtime.log.1").exists(), "rotated"
        assert not (logs / "runtime.log.3").exists(), "log.keep = 2"
        for path in logs.glob("runtime.log*"):
            assert path.stat().st_size <= 64 * 1024 + 8 * 1024, path  # at most a line over


async def test_a_calls_line_is_written_while_its_client_stays_connected(tmp_path: Path) -> None:
    # The line is written once the answer is on its way (after the SDK's request task), not
    # when the client's session ends.
    workdir = str(tmp_path)
    with local_env() as local:
        local.run("local", "start", workdir)
        async with connected(local) as mcp:
            await mcp.exec("exit 7", workdir)
            line = wait_for_value(
                lambda: next(
                    (x for x in call_lines(log_path(local).read_text()) if "exit_code=7" in x), None
                ),
                what="the call's line in runtime.log",
            )
            assert "call exec_command agent=" in line and "outcome=ok exit_code=7 duration_ms=" in line
            await mcp.exec("exit 8", workdir)  # the session still serves calls, each with its line
            wait_for_value(
                lambda: next(
                    (x for x in call_lines(log_path(local).read_text()) if "exit_code=8" in x), None
                ),
                what="the second call's line in runtime.log",
            )
