"""Follow a log file: its last lines, then each line as it is written (``zodex sprite
logs --follow``; the same algorithm as ``zodex local logs --follow``).

It waits on inotify events for the log's directory, never on a timer: a write to the log
wakes it, and so does the log being replaced (rotation renames it to ``<name>.1`` and opens
a new one), after which it finishes the old file and reads the new one from its start.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from zodex_system import inotify
from zodex_system.log_lines import escape_controls

TAIL_BYTES = 256 * 1024
READ_BYTES = 64 * 1024
# Anything that may mean the log was written, or that the name now holds another file.
_DIRECTORY_EVENTS = (
    inotify.IN_MODIFY
    | inotify.IN_CREATE
    | inotify.IN_MOVED_TO
    | inotify.IN_MOVED_FROM
    | inotify.IN_DELETE
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
)
_DIRECTORY_GONE = inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF | inotify.IN_IGNORED


def echo_safely(line: str) -> None:
    """Print one log line with its control characters escaped: whatever wrote the log, no
    escape sequence reaches the operator's terminal (``zodex … logs``)."""
    sys.stdout.write(escape_controls(line) + "\n")
    sys.stdout.flush()


class FollowError(Exception):
    """The log cannot be followed; one line."""


def tail(path: Path, count: int) -> list[str]:
    """The last ``count`` lines of ``path`` (an unfinished last line included); none if it is missing."""
    log = _OpenLog.open(path)
    if log is None:
        return []
    lines = log.tail(count)
    rest = log.finish()
    return (lines + rest)[-count:] if count > 0 else []


class _OpenLog:
    """One log file, open: the lines appended to it since the last read."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.inode = os.fstat(fd).st_ino
        self._partial = b""

    @classmethod
    def open(cls, path: Path) -> _OpenLog | None:
        try:
            return cls(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except FileNotFoundError:
            return None

    def tail(self, count: int) -> list[str]:
        """The last ``count`` complete lines now in the file; reading goes on from its end."""
        end = os.lseek(self.fd, 0, os.SEEK_END)
        start = max(0, end - TAIL_BYTES)
        os.lseek(self.fd, start, os.SEEK_SET)
        lines = self.new_lines()
        if start > 0 and lines:
            lines = lines[1:]  # the first one is cut
        return lines[-count:] if count > 0 else []

    def new_lines(self) -> list[str]:
        if os.fstat(self.fd).st_size < os.lseek(self.fd, 0, os.SEEK_CUR):
            os.lseek(self.fd, 0, os.SEEK_SET)  # truncated in place: start again
            self._partial = b""
        chunks = [self._partial]
        while chunk := os.read(self.fd, READ_BYTES):
            chunks.append(chunk)
        *complete, self._partial = b"".join(chunks).split(b"\n")
        return [line.decode(errors="replace") for line in complete]

    def finish(self) -> list[str]:
        """What is left, an unfinished last line included; then closed."""
        lines = self.new_lines()
        if self._partial:
            lines.append(self._partial.decode(errors="replace"))
        os.close(self.fd)
        return lines


def _replaced(path: Path, current: _OpenLog | None) -> bool:
    try:
        inode = os.stat(path).st_ino
    except FileNotFoundError:
        return False  # gone for now: keep what is open until a new one appears
    return current is None or inode != current.inode


def follow(
    path: Path, lines: int, emit: Callable[[str], None], stop_fd: int | None = None, missing_hint: str = ""
) -> None:
    """Emit the last ``lines`` lines of ``path``, then every new line, until ``stop_fd``
    becomes readable (tests) or the process is interrupted (Ctrl-C). ``missing_hint`` ends
    the error when the log's directory does not exist."""
    if stop_fd is None:
        # Ctrl-C (SIGINT) is how following ends, even for a follower started with SIGINT
        # ignored (a background job of a script inherits that): Python would then raise no
        # KeyboardInterrupt.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        notify = inotify.Inotify()
    except inotify.InotifyUnavailable as exc:
        raise FollowError(f"--follow needs Linux inotify: {exc}") from exc
    current: _OpenLog | None = None
    try:
        try:
            notify.watch(str(path.parent), _DIRECTORY_EVENTS)
        except OSError as exc:
            raise FollowError(f"cannot follow {path}: {exc.strerror}{missing_hint}") from exc
        current = _OpenLog.open(path)  # after the watch: nothing written in between is missed
        for line in current.tail(lines) if current is not None else []:
            emit(line)
        waited = [notify.fileno()] if stop_fd is None else [notify.fileno(), stop_fd]
        while True:
            readable, _, _ = select.select(waited, [], [])
            if stop_fd is not None and stop_fd in readable:
                return
            events = notify.read()
            for line in current.new_lines() if current is not None else []:
                emit(line)
            # A full queue (IN_Q_OVERFLOW) drops events, perhaps the directory's own end: look.
            overflowed = any(event.mask & inotify.IN_Q_OVERFLOW for event in events)
            if any(event.mask & _DIRECTORY_GONE for event in events) or (
                overflowed and not path.parent.is_dir()
            ):
                raise FollowError(f"stopped following: {path.parent} was removed or moved")
            if _replaced(path, current):
                for line in current.finish() if current is not None else []:
                    emit(line)
                current = _OpenLog.open(path)
                for line in current.new_lines() if current is not None else []:
                    emit(line)
    finally:
        if current is not None:
            os.close(current.fd)
        notify.close()
