"""The one small interface a session uses to talk to its terminal, and its POSIX backend.

The backend spawns the child in a new session with the PTY as its controlling terminal and
hands the master fd to the caller: the worker's event loop owns the fd and its reaper owns
the exit status (nothing here sleeps, waits or signals on the hot path).

Hand-written, not ptyprocess: it forks the whole interpreter for each command and waits on
the child itself, where Linux needs ``posix_spawn`` (a third of the cost) and one reaper.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import struct
import sys
import termios
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Protocol

ROWS = 50
COLS = 200


class Terminal(Protocol):
    pid: int
    fd: int
    closed: bool

    def write(self, data: bytes) -> int: ...

    def close(self) -> None: ...


@dataclass
class PosixTerminal:
    pid: int
    fd: int
    closed: bool = False

    def write(self, data: bytes) -> int:
        return os.write(self.fd, data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                os.close(self.fd)
            except OSError:
                pass


def _winsize(rows: int, cols: int) -> bytes:
    return struct.pack("HHHH", rows, cols, 0, 0)


# A command starts with every signal at its default and none blocked, as a terminal starts
# a login shell: Python ignores SIGPIPE and SIGXFSZ, and a gateway started from a background
# job of a script, or by nohup, inherits SIGINT and SIGQUIT (or SIGHUP) ignored, which its
# commands would inherit in turn: Ctrl-C and Ctrl-\ would then do nothing.
DEFAULT_SIGNALS: Final = tuple(sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}))


def spawn_terminal(argv: list[str], cwd: str, env: dict[str, str]) -> Terminal:
    """Start ``argv`` on a fresh 200×50 PTY as a new session whose controlling terminal is
    the PTY; raises OSError if it cannot be started."""
    if sys.platform == "win32":  # pragma: no cover - Windows backend not built yet
        raise OSError("Windows PTYs (ConPTY via pywinpty) are not supported yet")
    if sys.platform.startswith("linux"):
        with _inside(cwd):
            return _spawn_with_posix_spawn(_resolve(argv, env), env)
    # Other POSIX systems (macOS): mypy, checking for Linux, sees this line as unreachable.
    return _spawn_with_forkpty(_resolve(argv, env), cwd, env)  # type: ignore[unreachable]


def _resolve(argv: list[str], env: dict[str, str]) -> list[str]:
    program = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0], path=env.get("PATH"))
    if program is None:
        raise FileNotFoundError(f"command not found: {argv[0]}")
    return [program, *argv[1:]]


_start_dir: int | None = None


@contextlib.contextmanager
def _inside(cwd: str) -> Iterator[None]:
    """Be in ``cwd`` for the spawn, entered by path every time, then return to where the
    worker started (docs/tools.md#exec_command).

    ``posix_spawn`` has no working-directory action in Python, so the child inherits ours.
    The directory may have been removed and recreated since the last command, and
    ``os.getcwd()`` fails inside a deleted one: the worker never trusts or compares its
    current directory. Going back afterwards (through a descriptor opened at the first
    spawn) keeps the worker's relative paths meaning what they did at start and never
    pins the workdir's file system between commands. Two system calls, a few µs.
    """
    global _start_dir
    if _start_dir is None:
        _start_dir = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.fchdir(_start_dir)


def _spawn_with_posix_spawn(argv: list[str], env: dict[str, str]) -> Terminal:
    """The fast path on Linux: ``posix_spawn`` (vfork + exec in libc, no Python in the child).

    The child calls ``setsid()`` and then, as its first file action, opens the PTY's slave by
    path without ``O_NOCTTY``: a session leader with no controlling terminal acquires the tty
    it opens, which is exactly ``login_tty`` without a fork of our own. Measured: 1.2 ms to
    run ``bash -c true`` to the end, against 3.5 ms for a Python fork of a worker-sized heap.
    The child starts in the worker's current directory: the caller has moved there.
    """
    master, slave = os.openpty()
    try:
        fcntl.ioctl(master, termios.TIOCSWINSZ, _winsize(ROWS, COLS))
        pid = os.posix_spawn(
            argv[0],
            argv,
            env,
            setsid=True,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.ttyname(slave), os.O_RDWR, 0),
                (os.POSIX_SPAWN_DUP2, 0, 1),
                (os.POSIX_SPAWN_DUP2, 0, 2),
            ],
            setsigdef=DEFAULT_SIGNALS,
            setsigmask=(),
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)  # the child opened its own; ours would only hide the end of the stream
    os.set_blocking(master, False)
    return PosixTerminal(pid=pid, fd=master)


def _spawn_with_forkpty(argv: list[str], cwd: str, env: dict[str, str]) -> Terminal:
    """Portable path: ``os.forkpty`` makes the child a session leader with the PTY as its
    controlling terminal; the child runs only a few system calls before ``execve``, and a
    close-on-exec pipe carries an exec failure back so a bad command fails at spawn time."""
    winsize = _winsize(ROWS, COLS)
    errors_r, errors_w = os.pipe2(os.O_CLOEXEC) if hasattr(os, "pipe2") else os.pipe()
    pid, fd = os.forkpty()
    if pid == 0:  # child: nothing but system calls until exec
        try:
            os.close(errors_r)
            fcntl.ioctl(0, termios.TIOCSWINSZ, winsize)
            for sig in DEFAULT_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        except BaseException as exc:
            os.write(errors_w, f"{type(exc).__name__}: {exc}".encode(errors="replace"))
        finally:
            os._exit(127)
    os.close(errors_w)
    try:
        failure = os.read(errors_r, 4096)
    finally:
        os.close(errors_r)
    os.set_inheritable(fd, False)
    if failure:
        os.close(fd)
        os.waitpid(pid, 0)  # not yet known to the reaper: collect it here
        raise OSError(failure.decode(errors="replace"))
    os.set_blocking(fd, False)
    return PosixTerminal(pid=pid, fd=fd)
