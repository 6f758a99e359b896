"""Finding a session's processes and signalling only the ones we saw (docs/sessions.md)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_for_value
from zodex_system import proctree

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(not proctree.HAVE_PROC, reason="needs Linux /proc"),
]

HANDLE = "abcdefg1-0123456789"
DECOY = "abcdefg1-zzzzzzzzzz"
# An orphan that called setsid (our target), a decoy orphan marked for another session,
# then the leader itself.
LEADER_SCRIPT = (
    f"(setsid sleep 300 &); ({proctree.SESSION_MARKER}={DECOY} setsid sleep 301 &); exec sleep 302"
)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode().split("\0")[:-1]
    except OSError:
        return []


def zombie_info(pid: int) -> proctree.ProcInfo | None:
    info = proctree.read_proc(pid)
    return info if info is not None and info.zombie else None


def settled_orphans(owner: int, leader: int) -> dict[str, proctree.ProcInfo] | None:
    """The owner's two orphans by their sleep argument, once both are in their own session
    and running sleep; None before that."""
    found: dict[str, proctree.ProcInfo] = {}
    for info in proctree.snapshot().values():
        argv = cmdline(info.pid)
        if info.ppid == owner and info.pid != leader and argv[:1] == ["sleep"] and info.sid == info.pid:
            found[argv[1]] = info
    return found if set(found) == {"300", "301"} else None


def test_session_members_finds_a_setsid_orphan_by_its_marker() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-m", "tests.support.proc_owner", HANDLE, LEADER_SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    # Carries the right marker but is not the owner's descendant: never a member.
    stranger = subprocess.Popen(
        ["sleep", "303"], env={**os.environ, proctree.SESSION_MARKER: HANDLE}, start_new_session=True
    )
    assert owner.stdin is not None and owner.stdout is not None
    try:
        leader = json.loads(owner.stdout.readline())["leader"]
        orphans = wait_for_value(
            lambda: settled_orphans(owner.pid, leader), 10, "orphans in their own session"
        )
        target, decoy = orphans["300"], orphans["301"]
        leader_info = proctree.read_proc(leader)
        assert leader_info is not None and leader_info.sid == leader
        assert target.sid != leader and target.pgid != leader, "it left the session's group"

        members = proctree.session_members(leader, leader_info.start, HANDLE, owner_pid=owner.pid)
        assert {m.pid for m in members} == {leader, target.pid}
        assert decoy.pid not in {m.pid for m in members}
        assert stranger.pid not in {m.pid for m in members}
        assert proctree.live_count(members) == 2
        other = proctree.session_members(leader, leader_info.start, DECOY, owner_pid=owner.pid)
        assert {m.pid for m in other} == {leader, decoy.pid}, "the marker, not the tree, picks the orphan"
    finally:
        owner.stdin.close()
        owner.wait(10)
        owner.stdout.close()
        stranger.kill()
        stranger.wait(10)
    assert owner.returncode == 0
    assert proctree.live_count(members) == 0


def test_a_later_start_floor_excludes_older_processes(sleeper: subprocess.Popen[bytes]) -> None:
    info = proctree.read_proc(sleeper.pid)
    assert info is not None
    assert proctree.session_members(sleeper.pid, info.start, "x") == [info]
    assert proctree.session_members(sleeper.pid, info.start + 1, "x") == [], "a reused pid is not ours"


def test_signal_process_refuses_a_process_with_another_start(sleeper: subprocess.Popen[bytes]) -> None:
    real = proctree.read_proc(sleeper.pid)
    assert real is not None and real.ppid == os.getpid()
    impostor = dataclasses.replace(real, start=real.start + 1)
    assert proctree.signal_process(impostor, signal.SIGTERM) is False
    assert proctree.signal_process(real, signal.SIGKILL) is True
    # A delivered SIGTERM would have been fatal first and named the exit.
    assert sleeper.wait(10) == -signal.SIGKILL
    assert proctree.signal_process(real, signal.SIGKILL) is False, "a reaped process is gone"


def test_live_count_skips_zombies_and_strangers(sleeper: subprocess.Popen[bytes]) -> None:
    running = proctree.read_proc(sleeper.pid)
    short = subprocess.Popen(["true"])
    try:
        zombie = wait_for_value(lambda: zombie_info(short.pid), 10, "an unreaped exited child")
        assert running is not None
        stranger = dataclasses.replace(running, start=running.start - 1)
        assert proctree.live_count([running]) == 1
        assert proctree.live_count([running, zombie, stranger]) == 1
    finally:
        short.wait(10)
    assert proctree.live_count([zombie]) == 0


def test_read_proc_survives_parentheses_in_the_command_name(tmp_path: Path) -> None:
    odd = tmp_path / "we ) ird ("
    shutil.copy("/bin/sleep", odd)
    proc = subprocess.Popen([str(odd), "300"])
    try:
        info = proctree.read_proc(proc.pid)
        assert info is not None
        assert (info.pid, info.ppid, info.zombie) == (proc.pid, os.getpid(), False)
        assert info.start == proctree.start_time(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)
    assert proctree.read_proc(2**22 + 1) is None
