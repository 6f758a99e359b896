"""Linux inotify through ctypes: the few calls ``zodex local logs --follow`` needs to wait
for a file to change, or to be replaced, as an event rather than on a timer."""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from typing import Final

IN_MODIFY: Final = 0x00000002
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000

_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = os.O_CLOEXEC
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)


class InotifyUnavailable(OSError):
    pass


@dataclass(frozen=True)
class Event:
    wd: int
    mask: int
    name: str  # for a watched directory: the entry the event is about ("" for the directory)


class Inotify:
    """One inotify instance: ``fileno()`` becomes readable when events are queued."""

    def __init__(self) -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._add_watch = libc.inotify_add_watch
            init = libc.inotify_init1
        except (OSError, AttributeError) as exc:
            raise InotifyUnavailable(f"inotify is not available here: {exc}") from exc
        self._add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._add_watch.restype = ctypes.c_int
        fd = init(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            errno = ctypes.get_errno()
            raise InotifyUnavailable(errno, f"inotify_init1: {os.strerror(errno)}")
        self._fd: int = fd

    def fileno(self) -> int:
        return self._fd

    def watch(self, path: str, mask: int) -> int:
        wd: int = self._add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), path)
        return wd

    def read(self) -> list[Event]:
        """The queued events (none if nothing is queued: the descriptor is non-blocking)."""
        try:
            data = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return []
        events = []
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            offset += _HEADER.size
            name = data[offset : offset + length].rstrip(b"\0")
            offset += length
            events.append(Event(wd, mask, os.fsdecode(name)))
        return events

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Inotify:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
