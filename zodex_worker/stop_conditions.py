"""When a worker stops: asked to, its runtime gone, idle too long, or signalled.

The runtime's owner holds ``runtime.lock`` exclusively for its whole life. A watcher
thread blocks on a shared lock of the same file: the kernel grants it the moment the
owner exits, however it died — an event, not a poll. Idle exit is a deadline restarted
whenever the last running session ends.
"""

from __future__ import annotations

import _thread
import asyncio
import fcntl
import os
from collections.abc import Callable
from pathlib import Path


def watch_runtime_owner(lock_path: Path, loop: asyncio.AbstractEventLoop, gone: asyncio.Event) -> None:
    def wait_for_owner() -> None:
        try:
            fd = os.open(lock_path, os.O_RDONLY)
        except OSError:
            loop.call_soon_threadsafe(gone.set)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # blocks until the owner's exclusive lock is released
        except OSError:
            pass
        finally:
            os.close(fd)
        loop.call_soon_threadsafe(gone.set)

    # Not threading.Thread: its start() waits until the new thread has run, which on a
    # loaded machine is a scheduler's delay (up to tens of ms) on every worker's start.
    # The watch needs no join and, like a daemon thread, does not hold up the exit.
    _thread.start_new_thread(wait_for_owner, ())


class IdleTimer:
    """``still_busy`` is asked when the deadline comes: jobs a command left behind keep
    the worker (it would kill them on exit), so the deadline starts again instead."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        seconds: float,
        expired: asyncio.Event,
        still_busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self._loop = loop
        self._seconds = seconds
        self._expired = expired
        self._still_busy = still_busy
        self._handle: asyncio.TimerHandle | None = None

    def update(self, running_sessions: int) -> None:
        if running_sessions:
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
        elif self._handle is None:
            self._handle = self._loop.call_later(self._seconds, self._deadline)

    def _deadline(self) -> None:
        if self._still_busy():
            self._handle = self._loop.call_later(self._seconds, self._deadline)
        else:
            self._expired.set()
