"""The one small interface a session uses to talk to its terminal, and its POSIX backend.

The backend spawns the child in a new session with the PTY as its controlling terminal
(ptyprocess does the fork/exec and reports a failed exec at spawn time), then hands the
master fd to the caller. We never call ptyprocess's close/terminate/wait: they sleep by
design; the worker's event loop owns the fd and its reaper owns the exit status.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Protocol

ROWS = 50
COLS = 200


class Terminal(Protocol):
    pid: int
    fd: int
    closed: bool

    def write(self, data: bytes) -> int: ...

    def resize(self, rows: int, cols: int) -> None: ...

    def close(self) -> None: ...


@dataclass
class PosixTerminal:
    pid: int
    fd: int
    closed: bool = False

    def write(self, data: bytes) -> int:
        return os.write(self.fd, data)

    def resize(self, rows: int, cols: int) -> None:
        import fcntl
        import struct
        import termios

        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                os.close(self.fd)
            except OSError:
                pass


def spawn_terminal(argv: list[str], cwd: str, env: dict[str, str]) -> Terminal:
    """Start ``argv`` on a fresh 200×50 PTY; raises OSError if it cannot be executed."""
    if sys.platform == "win32":  # pragma: no cover - Windows backend not built yet
        raise OSError("Windows PTYs (ConPTY via pywinpty) are not supported yet")
    from ptyprocess import PtyProcess

    proc = PtyProcess.spawn(argv, cwd=cwd, env=env, dimensions=(ROWS, COLS))
    # Take our own copy of the master fd and retire ptyprocess's object, so its
    # destructor (which sleeps and signals) never runs against our child.
    fd = os.dup(proc.fd)
    proc.fileobj.close()
    proc.closed = True
    os.set_blocking(fd, False)
    return PosixTerminal(pid=proc.pid, fd=fd)
