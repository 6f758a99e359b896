"""Disk space kept aside so that a full disk never leaves a call recorded as pending.

A command's output can fill the disk that holds the history (the spill file, the captured
output). The model still gets its result, so the call's completion must still be written
(docs/history.md#recording). The owner of the history keeps a file of reserved space
beside the database; when an essential write (a call's completion, a command's start or
end, an output gap) fails for lack of space, the file is given up and the write tried once
more. While the reserve is spent, command output is not stored (the capture marks it
incomplete), so that output cannot eat the space meant for completions; the reserve is
made again at the next call once there is room.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path
from typing import Final

RESERVE_NAME: Final = "history.reserve"
DEFAULT_RESERVE_BYTES: Final = 1024 * 1024  # a completion of the largest exec result is ~100 KiB of WAL

_CHUNK: Final = 64 * 1024


def is_disk_full(error: BaseException | None) -> bool:
    """Whether an SQLite error (as the cause of HistoryUnavailable) means no space left."""
    code = getattr(error, "sqlite_errorcode", None)
    if not isinstance(error, sqlite3.Error) or not isinstance(code, int):
        return False
    return code == sqlite3.SQLITE_FULL or code & 0xFF == sqlite3.SQLITE_IOERR


class SpaceReserve:
    def __init__(self, path: Path, size: int = DEFAULT_RESERVE_BYTES) -> None:
        self.path = path
        self.size = size
        self.present = False
        self.spent = False  # given up for a full disk and not made again yet

    def ensure(self) -> bool:
        """Make the reserve if it is not there (cheap when it is); False while there is no
        room for it."""
        if self.present or self.size <= 0:
            return True
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return False
        try:
            os.fchmod(fd, 0o600)  # whatever the umask, like the database beside it
            _allocate(fd, self.size)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # a partial reserve only takes space from the disk
            return False
        os.close(fd)
        self.present = True
        self.spent = False
        return True

    def release(self) -> bool:
        """Give the space back to the disk; False when there was none to give."""
        if not self.present:
            return False
        self.present = False
        self.spent = True
        try:
            os.unlink(self.path)
        except OSError:
            return False
        return True


def _allocate(fd: int, size: int) -> None:
    """Really take ``size`` bytes: allocated blocks, not a sparse file."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    # No fallocate here: write bytes that no file system can compress away.
    block = os.urandom(_CHUNK)
    written = 0
    while written < size:
        written += os.write(fd, block[: min(_CHUNK, size - written)])
    os.fsync(fd)
