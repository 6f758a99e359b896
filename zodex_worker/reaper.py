"""The worker's single child reaper.

The worker is a child subreaper (Linux), so descendants orphaned by a command are
re-parented to it instead of init: the reaper collects them too, and the session code
can still find them. Exactly one place calls ``waitpid`` (through
:func:`zodex_system.proctree.exited_children`): here, on SIGCHLD, through the event loop's
signal wake-up fd — no polling, no thread per child.
"""

from __future__ import annotations

import asyncio
import ctypes
import signal
import sys
from collections.abc import Callable

from zodex_system import proctree

PR_SET_CHILD_SUBREAPER = 36

ExitCallback = Callable[[int, int], None]  # (pid, raw wait status)


def become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        # The C library this process already runs: find_library would run ldconfig.
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class Reaper:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._watched: dict[int, ExitCallback] = {}
        self._any_exit = asyncio.Event()
        loop.add_signal_handler(signal.SIGCHLD, self.reap)

    def watch(self, pid: int, callback: ExitCallback) -> None:
        """Call ``callback`` from the loop once ``pid`` has exited and been reaped.

        Register right after spawning, before yielding to the loop: SIGCHLD is only
        handled from the loop, so the status cannot be collected in between.
        """
        self._watched[pid] = callback

    async def wait_any_exit(self, timeout: float) -> None:
        """Wait until some child exits (or the timeout passes)."""
        self._any_exit.clear()
        try:
            await asyncio.wait_for(self._any_exit.wait(), timeout)
        except TimeoutError:
            pass

    def reap(self) -> None:
        for pid, status in proctree.exited_children():
            self._any_exit.set()
            callback = self._watched.pop(pid, None)
            if callback is not None:
                callback(pid, status)

    def close(self) -> None:
        self._loop.remove_signal_handler(signal.SIGCHLD)
