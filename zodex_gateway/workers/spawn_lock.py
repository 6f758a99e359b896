"""The per-workdir spawn lock (docs/protocol.md): one gateway at a time starts a workdir's
worker. Taken at once when free; otherwise waited for with a bound, on a thread of its own;
always in a file this process owns.

A lock someone else holds for good (a hung gateway, or in Sprite the agent, who can write
the registry directory) must cost only that workdir's call, after :data:`SPAWN_LOCK_WAIT_S`,
and never a thread of the shared executor: ``flock`` cannot be interrupted, so each wait
has a thread of its own, which closes the file when it gets the lock after all. A lock file
another account made (the agent, planting it before the service) is not used: it is
replaced by one of this process's own, so whatever lock its maker holds guards nothing.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from pathlib import Path
from typing import Final

from zodex_system import in_the_way

SPAWN_LOCK_WAIT_S: Final = 10.0
# O_NONBLOCK: a FIFO planted at the path cannot hold the open up, so it is made on the loop
# (a thread would cost a scheduler's delay on every worker start of a loaded machine).
FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class SpawnLockUnavailable(Exception):
    """One line: why the lock could not be had."""


def open_own(path: Path) -> int:
    """The lock file, opened: never through a link, and made anew when what is there is
    not this process's own regular file (a link, a directory, another account's file)."""
    for _ in range(3):
        try:
            fd = os.open(path, FLAGS, 0o600)
        except OSError as exc:
            last = exc.strerror or str(exc)
        else:
            info = os.fstat(fd)
            if info.st_uid == os.geteuid() and (info.st_mode & 0o170000) == 0o100000:
                return fd
            os.close(fd)
            last = "it belongs to another account"
        in_the_way.clear(path)  # what stays is met again by the next open
    raise SpawnLockUnavailable(f"cannot be opened ({last})")


class _Waiter:
    """One wait for the lock, on its own thread. Whoever comes second — the thread that got
    the lock, or the call that stopped waiting — closes the file, so the lock is never left
    held by nobody."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        self.fd = fd
        self.done = asyncio.Event()
        self._loop = loop
        self._guard = threading.Lock()
        self.error: OSError | None = None
        self.locked = False
        self.abandoned = False

    def run(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            self.error = exc
        with self._guard:
            if self.abandoned:
                os.close(self.fd)  # the call gave up: let the lock go at once
                return
            self.locked = self.error is None
        self._loop.call_soon_threadsafe(self.done.set)

    def abandon(self) -> bool:
        """Stop waiting; True when the lock was had meanwhile (the caller then keeps it)."""
        with self._guard:
            if self.locked:
                return True
            if self.error is not None:
                os.close(self.fd)
            else:
                self.abandoned = True  # the thread closes it if it ever gets the lock
            return False


async def take(path: Path, wait_s: float | None = None) -> int:
    """The locked file's descriptor (closing it releases the lock)."""
    wait_s = SPAWN_LOCK_WAIT_S if wait_s is None else wait_s
    fd = open_own(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pass  # held: wait for it on a thread of its own
    except OSError as exc:
        os.close(fd)
        raise SpawnLockUnavailable(f"cannot be locked ({exc.strerror})") from None
    else:
        return fd  # free, as nearly always: no thread to start and be scheduled
    waiter = _Waiter(fd, asyncio.get_running_loop())
    threading.Thread(target=waiter.run, name="zodex-spawn-lock", daemon=True).start()
    try:
        await asyncio.wait_for(waiter.done.wait(), wait_s)
    except TimeoutError:
        if waiter.abandon():
            return fd
        raise SpawnLockUnavailable(f"is held by another process for over {wait_s:g} s") from None
    except BaseException:
        if waiter.abandon():
            os.close(fd)
        raise
    if waiter.error is not None:
        os.close(fd)
        raise SpawnLockUnavailable(f"cannot be locked ({waiter.error.strerror})")
    return fd
