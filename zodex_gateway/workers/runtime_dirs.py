"""A runtime directory's owner marks, and the removal of directories whose owner is gone.

The owner holds ``runtime.lock`` exclusively for its whole life and writes ``owner.json``
(its pid and start time). A gateway that died by SIGKILL cannot remove its directory (the
signing key, the lock, the worker registry), so every new owner removes, beside its own,
the directories whose owner is gone: nobody holds the lock, the recorded owner is dead (pid
checked with its start time), and no registered worker still runs
(docs/security.md#state-directories).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from zodex_protocol.layout import RuntimeLayout, WorkerRecord
from zodex_system import proctree

log = logging.getLogger("zodex.gateway")

RUNTIME_ID_RE: Final = re.compile(r"^[0-9a-f]{12}$")
# A directory with no owner record yet may be one a gateway is creating right now.
UNMARKED_GRACE_S: Final = 60.0


def write_owner_file(layout: RuntimeLayout) -> None:
    """Record this process as the directory's owner (pid and start time)."""
    pid = os.getpid()
    data = json.dumps({"pid": pid, "pid_start": proctree.start_time(pid)})
    tmp = layout.owner_file.with_name(f".owner.{pid}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)
    os.replace(tmp, layout.owner_file)


def hold_lock(layout: RuntimeLayout) -> int:
    """Create ``runtime.lock`` and hold it exclusively; returns the descriptor.

    A gateway cleaning up may hold the lock for a moment while it looks at the directory
    (it leaves a young or owned one alone). Raises FileNotFoundError if the file was
    removed meanwhile, so the lock held is never on a file nobody else can find."""
    fd = os.open(layout.runtime_lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not holds(fd, layout):
            raise FileNotFoundError(f"{layout.runtime_lock} was removed while it was being locked")
    except BaseException:
        os.close(fd)
        raise
    return fd


def holds(fd: int, layout: RuntimeLayout) -> bool:
    """Whether ``fd`` is still the file at ``runtime.lock`` (not removed or replaced)."""
    try:
        here = os.stat(layout.runtime_lock, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _owner_alive(layout: RuntimeLayout) -> bool | None:
    """True/False from ``owner.json``; None when there is no readable record."""
    try:
        data = json.loads(layout.owner_file.read_text())
        pid, start = int(data["pid"]), data["pid_start"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return proctree.is_alive(pid, start if isinstance(start, int) else None)


def _workers_alive(layout: RuntimeLayout) -> bool:
    try:
        paths = list(layout.workers_dir.glob("*.json"))
    except OSError:
        return False
    for path in paths:
        record = WorkerRecord.read(path)
        if record is not None and proctree.is_alive(record.pid, record.pid_start):
            return True
    return False


def _try_lock(layout: RuntimeLayout) -> int | None:
    """A descriptor holding the directory's lock, or None when it has no lock file.
    Raises OSError (BlockingIOError) when someone holds it."""
    try:
        fd = os.open(layout.runtime_lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def remove_abandoned_runtimes(
    base: Path,
    *,
    keep: Path,
    before_removal: Callable[[Path], object] = lambda _root: None,
    now: float | None = None,
) -> list[Path]:
    """Remove the runtime directories under ``base`` whose owner is gone; returns them.

    Only our own plain directories named like a runtime id are considered. The lock is
    held while a directory is removed, so an owner creating it meanwhile notices (its lock
    file is no longer at the path) and starts again. ``before_removal`` ends what the dead
    runtime may have left elsewhere (its session cgroups)."""
    removed: list[Path] = []
    when = time.time() if now is None else now
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        root = Path(entry.path)
        if root == keep or not RUNTIME_ID_RE.match(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        layout = RuntimeLayout(root)
        try:
            lock = _try_lock(layout)
        except OSError:
            continue  # its owner (or a worker seeing it go) holds the lock
        try:
            owner = _owner_alive(layout)
            if owner or (owner is None and when - info.st_mtime < UNMARKED_GRACE_S):
                continue  # alive, or perhaps being created right now
            if _workers_alive(layout):
                continue  # still shutting down: the next gateway removes it
            before_removal(root)
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root)
            log.info("removed the runtime directory %s: its owner is gone", root)
        finally:
            if lock is not None:
                os.close(lock)
    return removed
