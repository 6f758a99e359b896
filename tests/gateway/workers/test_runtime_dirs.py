"""Which runtime directories a new owner removes: only ours, named like a runtime, with no
lock held, no live owner and no live worker (docs/security.md#state-directories)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from zodex_gateway.workers.runtime_dirs import (
    UNMARKED_GRACE_S,
    hold_lock,
    holds,
    remove_abandoned_runtimes,
    write_owner_file,
)
from zodex_protocol.layout import RuntimeLayout, WorkerRecord
from zodex_system import proctree


def make_runtime(base: Path, name: str, *, owner_pid: int | None = None) -> RuntimeLayout:
    layout = RuntimeLayout(base / name)
    layout.create()
    layout.key_file.write_bytes(b"k" * 32)
    layout.runtime_lock.touch()
    if owner_pid is not None:
        start = proctree.start_time(owner_pid)
        layout.owner_file.write_text(json.dumps({"pid": owner_pid, "pid_start": start}))
    return layout


def dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_dead_owners_directory_is_removed_and_others_stay(tmp_path: Path) -> None:
    keep = make_runtime(tmp_path, "aaaaaaaaaaaa", owner_pid=os.getpid())
    dead = make_runtime(tmp_path, "bbbbbbbbbbbb", owner_pid=dead_pid())
    alive_owner = make_runtime(tmp_path, "cccccccccccc", owner_pid=os.getpid())  # lock free, owner alive
    young = make_runtime(tmp_path, "dddddddddddd")  # being created: no owner record yet
    old = make_runtime(tmp_path, "eeeeeeeeeeee")
    age(old.root, UNMARKED_GRACE_S + 5)
    held = make_runtime(tmp_path, "ffffffffffff", owner_pid=dead_pid())
    fd = os.open(held.runtime_lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # e.g. a worker seeing its owner go
    other = tmp_path / "not-a-runtime"
    other.mkdir()
    (tmp_path / "999999999999").symlink_to(other)
    try:
        removed = remove_abandoned_runtimes(tmp_path, keep=keep.root)
    finally:
        os.close(fd)
    assert sorted(removed) == [dead.root, old.root]
    assert not dead.root.exists() and not old.root.exists()
    for layout in (keep, alive_owner, young, held):
        assert layout.key_file.exists(), layout.root
    assert other.is_dir() and (tmp_path / "999999999999").is_symlink()


def test_a_directory_with_a_live_worker_waits(tmp_path: Path) -> None:
    layout = make_runtime(tmp_path, "aaaaaaaaaaaa", owner_pid=dead_pid())
    me = os.getpid()
    WorkerRecord("abcdefg", 1, me, proctree.start_time(me), "/", "ipc://x", "ipc://y", 1).write(
        layout.record_file("abcdefg")
    )
    assert remove_abandoned_runtimes(tmp_path, keep=tmp_path / "none") == []
    assert layout.key_file.exists()


def test_the_owner_lock_notices_a_removed_file(tmp_path: Path) -> None:
    layout = RuntimeLayout(tmp_path / "aaaaaaaaaaaa")
    layout.create()
    fd = hold_lock(layout)
    try:
        write_owner_file(layout)
        assert holds(fd, layout)
        assert json.loads(layout.owner_file.read_text())["pid"] == os.getpid()
        assert remove_abandoned_runtimes(tmp_path, keep=tmp_path / "none") == [], "a held lock keeps it"
        layout.runtime_lock.unlink()
        assert not holds(fd, layout)
    finally:
        os.close(fd)
