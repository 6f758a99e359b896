"""Spill files: a session's whole cleaned output on disk, for the model to read (docs/output.md#spill-files).

A spill file is private (``0600`` in a ``0700`` directory), written as UTF-8 straight to the
file descriptor so that a model running ``cat`` on it sees everything written so far, and
capped in size: past the cap nothing more is written and the file reports ``truncated``.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Final

__all__ = ["DEFAULT_FILE_CAP_BYTES", "SPILL_SUFFIX", "SpillFile", "remove_stale_spill_files"]

DEFAULT_FILE_CAP_BYTES: Final = 16 * 1024 * 1024
SPILL_SUFFIX: Final = ".log"

_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600
# O_CLOEXEC keeps the fd out of the commands the worker spawns; O_BINARY matters on Windows.
_OPEN_FLAGS: Final = (
    os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
)


def ensure_private_dir(directory: Path) -> None:
    """Create ``directory`` (and parents) and make sure it is mode 0700."""
    directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    # mkdir's mode is filtered by the umask and ignored for an existing directory.
    if stat.S_IMODE(directory.stat().st_mode) != _DIR_MODE:
        os.chmod(directory, _DIR_MODE)


def _utf8_boundary(data: bytes, limit: int) -> int:
    """The largest cut ``<= limit`` that does not split a UTF-8 character of ``data``."""
    if limit >= len(data):
        return len(data)
    cut = limit
    # Continuation bytes are 0b10xxxxxx; back off to the lead byte of the split character.
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut


class SpillFile:
    """An append-only, size-capped UTF-8 file.

    Opening creates the directory (0700) and the file (0600, ``O_EXCL`` so an existing file
    or a planted symlink is never written through); it raises ``OSError`` on failure. A
    write error later (disk full) does not raise: the file stops there and reports
    ``truncated`` with the reason in ``error``, because losing the tail of a log must not
    break the session.
    """

    def __init__(self, path: Path, *, cap_bytes: int = DEFAULT_FILE_CAP_BYTES) -> None:
        if cap_bytes < 0:
            raise ValueError("cap_bytes must not be negative")
        self.path = path.absolute()
        self.cap_bytes = cap_bytes
        self.bytes_written = 0
        self.truncated = False
        self.error: str | None = None  # why writing stopped early, e.g. No space left on device
        ensure_private_dir(self.path.parent)
        self._fd = os.open(self.path, _OPEN_FLAGS, _FILE_MODE)
        if hasattr(os, "fchmod"):  # the umask may have removed bits from 0600
            try:
                os.fchmod(self._fd, _FILE_MODE)
            except OSError:
                os.close(self._fd)
                raise

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def write(self, text: str) -> None:
        """Append ``text``; past the cap (or after an I/O error) drop it and mark truncated."""
        if self.truncated or self._fd < 0 or not text:
            return
        # "replace": a lone surrogate (never from the decoder) must not make invalid UTF-8.
        data = text.encode("utf-8", "replace")
        room = self.cap_bytes - self.bytes_written
        if len(data) > room:
            data = data[: _utf8_boundary(data, room)]
            self.truncated = True
        view = memoryview(data)
        try:
            while view:
                done = os.write(self._fd, view)
                self.bytes_written += done
                view = view[done:]
        except OSError as exc:
            self.truncated = True
            self.error = exc.strerror or str(exc)

    def close(self) -> None:
        """Close the descriptor; the file stays on disk. Idempotent."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def remove_stale_spill_files(directory: Path, max_age_seconds: float, now: float | None = None) -> int:
    """Delete spill files in ``directory`` last modified more than ``max_age_seconds`` ago.

    Returns how many were deleted. A missing directory, or a file that vanishes or cannot be
    removed meanwhile (another worker cleaning the same directory), is not an error. Only
    regular ``*.log`` files are touched; symlinks and anything else are left alone.
    """
    cutoff = (time.time() if now is None else now) - max_age_seconds
    removed = 0
    try:
        with os.scandir(directory) as it:
            entries = list(it)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for entry in entries:
        if not entry.name.endswith(SPILL_SUFFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode) or info.st_mtime >= cutoff:
                continue
            os.unlink(entry.path)
        except OSError:  # vanished or not ours to remove: someone else's business
            continue
        removed += 1
    return removed
