"""The result of exec_command / write_stdin (docs/tools.md#results): the summary line and which fields
appear. Formatting is checked on a fake session; real sessions check the paths that need
a real process (a signal, background jobs, a spill file)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import pid_alive, wait_for
from zodex_protocol import tombstones
from zodex_protocol.limits import Limits
from zodex_protocol.replies import SpilledOutput
from zodex_protocol.requests import ExecRequest, WriteRequest
from zodex_worker.output.screen import SessionScreen
from zodex_worker.reaper import Reaper
from zodex_worker.results import session_result, summary_line
from zodex_worker.service import WorkerConfig, WorkerService
from zodex_worker.session import Ending

HANDLE = "abcdefg1-0123456789"
BASE_FIELDS = {"summary", "status", "output", "cwd", "wall_time_ms"}
SPILL = {"output_file": "/s/f.txt", "output_chars": 20000, "output_lines": 3, "output_file_truncated": False}


@dataclass
class FakeOutput:
    spill: dict[str, Any] | None = None

    def spilled(self) -> SpilledOutput | None:
        return None if self.spill is None else SpilledOutput(**self.spill)


@dataclass
class FakeSession:
    """What results.py reads from a Session, and nothing else."""

    wall_ms: int
    ending: Ending | None = None
    handle: str = HANDLE
    cwd: str = "/work/dir"
    output: FakeOutput = field(default_factory=FakeOutput)
    screen: SessionScreen = field(default_factory=lambda: SessionScreen(50, 200))

    @property
    def running(self) -> bool:
        return self.ending is None

    def wall_time_ms(self) -> int:
        return self.wall_ms

    def refresh_cwd(self) -> str:
        return self.cwd


def ended(code: int = 0, sig: str | None = None, reason: str = "exit", background: int = 0) -> Ending:
    return Ending(exit_code=code, signal=sig, reason=reason, ended_at=0.0, background=background)


def summary(wall_ms: int, ending: Ending | None = None) -> str:
    return summary_line(FakeSession(wall_ms, ending))  # type: ignore[arg-type]


def result(session: FakeSession, output: str = "") -> dict[str, Any]:
    """The result as the wire carries it."""
    return session_result(session, output).to_body()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("wall_ms", "ending", "expected"),
    [
        (400, ended(0), "exited 0 after 0.4s"),
        (12_340, ended(3), "exited 3 after 12.3s"),
        (10_000, None, f"still running after 10.0s; use session_handle {HANDLE} to poll"),
        (30_000, ended(-1, "SIGTERM", "timeout"), "timed out after 30.0s"),
        (2_100, ended(-1, "SIGTERM", "killed"), "killed after 2.1s"),
        (2_100, ended(0, None, "killed"), "killed after 2.1s"),
        (1_000, ended(-1, "SIGSEGV"), "terminated by SIGSEGV after 1.0s"),
        (0, ended(0), "exited 0 after 0.0s"),
    ],
)
def test_summary_line(wall_ms: int, ending: Ending | None, expected: str) -> None:
    assert summary(wall_ms, ending) == expected


def test_background_suffix_singular_and_plural() -> None:
    assert summary(400, ended(0, background=1)) == "exited 0 after 0.4s; 1 background process still running"
    assert summary(400, ended(0, background=2)) == "exited 0 after 0.4s; 2 background processes still running"
    assert summary(5_000, ended(-1, "SIGTERM", "timeout", background=3)) == (
        "timed out after 5.0s; 3 background processes still running"
    )


def test_running_result_has_the_handle_and_no_exit_fields() -> None:
    r = result(FakeSession(1_500), "partial")
    assert r == {
        "summary": f"still running after 1.5s; use session_handle {HANDLE} to poll",
        "status": "running",
        "output": "partial",
        "cwd": "/work/dir",
        "wall_time_ms": 1_500,
        "session_handle": HANDLE,
    }


def test_exited_result_omits_handle_and_absent_signal() -> None:
    r = result(FakeSession(400, ended(0)), "done\n")
    assert set(r) == BASE_FIELDS | {"exit_code", "termination_reason"}
    assert (r["status"], r["exit_code"], r["termination_reason"]) == ("exited", 0, "exit")
    signalled = result(FakeSession(400, ended(-1, "SIGKILL", "killed")))
    assert (signalled["exit_code"], signalled["signal"]) == (-1, "SIGKILL")
    for value in (*r.values(), *signalled.values()):
        assert value is not None


def test_spill_fields_are_added_only_when_present() -> None:
    r = result(FakeSession(400, ended(0), output=FakeOutput(SPILL)))
    assert {k: r[k] for k in SPILL} == SPILL
    assert not set(SPILL) & set(result(FakeSession(400, ended(0))))


def test_tombstone_repeats_the_final_fields_without_output() -> None:
    final = session_result(FakeSession(400, ended(2)), "old output")  # type: ignore[arg-type]
    stone = tombstones.poll_result(final)
    assert stone.to_body() == {**final.to_body(), "output": ""}
    assert final.output == "old output", "the stored final result is not changed"


# ---- real sessions ----------------------------------------------------------------------


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[WorkerService]:
    reaper = Reaper(asyncio.get_running_loop())
    config = WorkerConfig(
        worker_id="abcdefg",
        incarnation=1,
        workdir=str(tmp_path.resolve()),
        spill_dir=tmp_path / "spill",
        shell=["/bin/bash", "-c"],
        limits=Limits(inline_output_chars=100, preview_chars=20),
    )
    svc = WorkerService(config, reaper, lambda _event: None)
    try:
        yield svc
    finally:
        await svc.shutdown()
        reaper.close()


async def run(service: WorkerService, cmd: str, **args: Any) -> dict[str, Any]:
    request = ExecRequest.from_body({"cmd": cmd, "workdir": service.config.workdir, **args}, service.limits)
    return (await service.exec(request)).to_body()


async def write(service: WorkerService, **args: Any) -> dict[str, Any]:
    return (await service.write(WriteRequest.from_body(args, service.limits))).to_body()


async def test_real_signal_death(service: WorkerService) -> None:
    r = await run(service, "kill -SEGV $$")
    assert re.fullmatch(r"terminated by SIGSEGV after \d+\.\ds", r["summary"]), r
    assert (r["exit_code"], r["signal"], r["termination_reason"]) == (-1, "SIGSEGV", "exit")
    assert "session_handle" not in r


async def test_real_background_jobs_are_counted_then_killed(service: WorkerService) -> None:
    # The shell controls the PTY: when it exits the kernel hangs up its group. Jobs that
    # ignore SIGHUP (inherited from the shell before the fork: no race) outlive it.
    r = await run(service, "trap '' HUP; sleep 300 & echo $!; sleep 301 & echo $!")
    assert re.fullmatch(r"exited 0 after \d+\.\ds; 2 background processes still running", r["summary"]), r
    pids = [int(line) for line in r["output"].split()]
    assert all(pid_alive(p) for p in pids)
    await service.shutdown()
    await wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "background jobs to die")


async def test_real_running_and_spilled_results(service: WorkerService) -> None:
    r = await run(service, "seq 1 100; sleep 300", yield_time_ms=50)
    while "output_file" not in r:  # the spill starts once the stream passes the inline limit
        r = await write(service, session_handle=r["session_handle"], yield_time_ms=2000)
    assert set(r) == BASE_FIELDS | {"session_handle"} | set(SPILL)
    assert r["output_file_truncated"] is False
    assert Path(r["output_file"]).read_text().startswith("1\n2\n3\n")
    r = await write(service, session_handle=r["session_handle"], kill_process=True)
    assert set(r) == BASE_FIELDS | {"exit_code", "signal", "termination_reason"} | set(SPILL)
    assert re.fullmatch(r"killed after \d+\.\ds", r["summary"]), r


def test_a_screen_replaces_the_output_with_one_line() -> None:
    session = FakeSession(1000)
    session.screen.feed("\x1b[?1049h\x1b[H\x1b[2Jhello\x1b[3;5Hworld")
    body = result(session, "helloworld")
    assert body["screen"] == {
        "rows": ["hello", "", "    world"],
        "cursor": [2, 9],
        "title": "",
        "alternate": True,
        "size": [50, 200],
    }
    assert body["output"] == (
        "[zodex] a full-screen program: its screen is in the `screen` field "
        "(10 characters of escape-stripped output not shown)"
    )
    # Plain lines: no screen, the output as it was.
    plain = FakeSession(1000)
    plain.screen.feed("one\r\ntwo\r\n")
    assert "screen" not in result(plain, "one\ntwo\n") and result(plain, "x")["output"] == "x"


def test_a_command_that_ended_is_answered_with_its_text() -> None:
    # `clear; ls`: a redraw, then a short listing; once it ended, the text as always.
    session = FakeSession(1000, ended(0))
    session.screen.feed("\x1b[H\x1b[2Ja.txt\r\nb.txt\r\n")
    body = result(session, "a.txt\nb.txt\n")
    assert "screen" not in body and body["output"] == "a.txt\nb.txt\n"
