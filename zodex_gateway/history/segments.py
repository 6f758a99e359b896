"""Command output outside SQLite: append-only segment files, one frame per chunk.

SQLite's WAL writes every page twice (once to the log, once at the checkpoint), which made
storing output the larger part of history's cost. So a chunk's text becomes one frame —
zstd, or for a flood the text as it is (:func:`compress`) — appended to its session's
current segment, ``history/output/<id>.zst``;
its ``output_chunks`` row keeps only where the frame lies (``segment``, ``frame_at``,
``frame_bytes``) and its UTF-8 ``size``. After :func:`segment_text_bytes` of text a session
starts a new segment, so the output cap's dropping of a tail's oldest chunks frees whole
files as it goes. A segment is removed with its last chunk.

Order makes a crash harmless: the frame is appended before its row is committed, and a
failed transaction truncates the file back. What a crash leaves (bytes no row refers to, a
file no segment row names) is trimmed off or removed when the owner next opens the history.
A row whose frame is missing or damaged reads as no text, and the output as incomplete.

The directory is ``0700`` and each file ``0600`` (whatever the umask), opened through the
directory's descriptor without following links; a file that is not a regular file of ours
with one link is refused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import zstandard

from zodex_gateway.history.records import HistoryUnavailable
from zodex_gateway.history.storage import SEGMENTS_DIR

SUFFIX: Final = ".zst"
DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
# A session's segment takes this much text (UTF-8 bytes) before the next one starts: large
# enough that a flood makes few files, small enough that a capped tail frees space soon
# (an eighth of the output cap, if less, so a capped command keeps at most about an eighth
# more than the cap on disk).
SEGMENT_TEXT_BYTES: Final = 1024 * 1024
MIN_SEGMENT_TEXT_BYTES: Final = 64 * 1024


def segment_text_bytes(cap: int | None) -> int:
    """The text a segment takes under an output cap of ``cap`` bytes (None: no cap)."""
    if cap is None:
        return SEGMENT_TEXT_BYTES
    return max(MIN_SEGMENT_TEXT_BYTES, min(SEGMENT_TEXT_BYTES, cap // 8))


# ~450 MB/s on terminal output here (`seq` 12x smaller); level 3 is no smaller and slower.
ZSTD_LEVEL: Final = 1
KEPT_OPEN: Final = 64  # segment descriptors kept open between batches

_per_thread = threading.local()


# A frame is a zstd frame, or this byte followed by the text as it is (see compress).
STORED: Final = b"\x00"


def compress(data: bytes, *, fast: bool = False) -> bytes:
    """One frame: zstd (its content size in the header), or, with ``fast``, the text
    stored as it is. Compressors are per thread: the capture's thread compresses outside
    the store's lock."""
    if fast:
        return STORED + data
    compressor = getattr(_per_thread, "compressor", None)
    if compressor is None:
        compressor = _per_thread.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    frame: bytes = compressor.compress(data)
    return frame


def decompress(frame: bytes) -> bytes | None:
    """The frame's content, or None when it is damaged."""
    if frame[:1] == STORED:
        return frame[1:]
    decompressor = getattr(_per_thread, "decompressor", None)
    if decompressor is None:
        decompressor = _per_thread.decompressor = zstandard.ZstdDecompressor()
    try:
        data: bytes = decompressor.decompress(frame)
    except zstandard.ZstdError:
        return None
    return data


def file_name(segment: int) -> str:
    return f"{segment}{SUFFIX}"


_NOT_PRIVATE: Final = "not a private regular file of this account (a link, or planted)"


class PlantedFile(OSError):
    """A segment path that is not a private regular file of ours."""


def _check_private(fd: int, name: str) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
        raise PlantedFile(errno.EPERM, _NOT_PRIVATE, name)
    if info.st_mode & 0o077:
        os.fchmod(fd, FILE_MODE)
    return info


class SegmentFiles:
    """The segment directory of one history, opened once; file names are only ever built
    from segment ids (numbers), never from anything a command printed."""

    def __init__(self, history_dir: Path) -> None:
        """Open (making) ``history/output``; raises HistoryUnavailable if it is not a private
        directory of this account (a planted link or another user's directory)."""
        self.path = history_dir / SEGMENTS_DIR
        try:
            try:
                os.mkdir(self.path, DIR_MODE)
            except FileExistsError:
                pass
            else:
                os.chmod(self.path, DIR_MODE)  # exactly, whatever the umask
            self._dir = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise HistoryUnavailable(f"history cannot open its output directory {self.path}: {exc}") from exc
        info = os.fstat(self._dir)
        if info.st_uid != os.geteuid():
            os.close(self._dir)
            raise HistoryUnavailable(
                f"history cannot open its output directory {self.path}: it belongs to another account"
            )
        if info.st_mode & 0o077:
            with contextlib.suppress(PermissionError):
                os.fchmod(self._dir, DIR_MODE)
        self._lock = threading.Lock()
        self._bytes = 0  # what the files take, kept as they change (the size limit asks often)
        # Descriptors of segments being appended to, kept between batches (opening and
        # checking a file per batch cost as much as writing a calm command's output).
        self._appending: OrderedDict[int, int] = OrderedDict()

    def close(self) -> None:
        with self._lock:
            for fd in self._appending.values():
                os.close(fd)
            self._appending.clear()
        if self._dir >= 0:
            os.close(self._dir)
            self._dir = -1

    @property
    def disk_bytes(self) -> int:
        return self._bytes

    def _grew(self, delta: int) -> None:
        with self._lock:
            self._bytes += delta

    def open_for_append(self, segment: int, *, new: bool) -> tuple[int, int]:
        """(descriptor, length), the descriptor the files' own until :meth:`release`: a new
        segment is made empty (a crash may have left a file of that id, which no row
        names); raises OSError, PlantedFile."""
        with self._lock:
            kept = self._appending.pop(segment, None)
        if kept is not None:
            info = os.fstat(kept)
            if not new and info.st_nlink == 1:
                return kept, info.st_size
            os.close(kept)  # removed by hand meanwhile: look again
        name = file_name(segment)
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if new else 0)
        try:
            fd = os.open(name, flags, FILE_MODE, dir_fd=self._dir)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
                raise PlantedFile(errno.EPERM, _NOT_PRIVATE, name) from exc
            raise
        try:
            info = _check_private(fd, name)
            length = info.st_size
            if new:
                os.fchmod(fd, FILE_MODE)  # exactly, whatever the umask
            if new and length:
                os.ftruncate(fd, 0)
                self._grew(-length)
                length = 0
        except BaseException:
            os.close(fd)
            raise
        return fd, length

    def release(self, segment: int, fd: int, *, keep: bool) -> None:
        """Done with a batch: keep the descriptor for the next one (at most
        :data:`KEPT_OPEN`, the least recently used closed first), or close it."""
        if not keep:
            os.close(fd)
            return
        with self._lock:
            self._appending[segment] = fd
            closing = []
            while len(self._appending) > KEPT_OPEN:
                closing.append(self._appending.popitem(last=False)[1])
        for old in closing:
            os.close(old)

    def append(self, fd: int, frame: bytes) -> None:
        """Write all of ``frame`` at the end; raises OSError (the caller truncates back)."""
        view = memoryview(frame)
        while view:
            written = os.write(fd, view)
            self._grew(written)
            view = view[written:]

    def truncate(self, fd: int, length: int) -> None:
        """Cut a file back to ``length`` (undoing appends a transaction did not keep)."""
        before = os.fstat(fd).st_size
        os.ftruncate(fd, length)
        self._grew(length - before)

    def read(self, segment: int, at: int, length: int) -> bytes | None:
        """The frame's content; None when the file or the frame is missing or damaged."""
        try:
            fd = os.open(file_name(segment), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dir)
        except OSError:
            return None
        try:
            _check_private(fd, file_name(segment))
            frame = os.pread(fd, length, at)
        except OSError:
            return None
        finally:
            os.close(fd)
        return decompress(frame) if len(frame) == length else None

    def remove(self, segments: Iterable[int]) -> None:
        for segment in segments:
            with self._lock:
                kept = self._appending.pop(segment, None)
            if kept is not None:
                os.close(kept)
            self._unlink(file_name(segment))

    def _unlink(self, name: str) -> None:
        try:
            size = os.stat(name, dir_fd=self._dir, follow_symlinks=False).st_size
            os.unlink(name, dir_fd=self._dir)
        except FileNotFoundError:
            return
        self._grew(-size)

    def reconcile(self, lengths: dict[int, int]) -> None:
        """At the owner's start: remove files no segment row names, trim bytes past the
        committed length (a crash between an append and its commit), and count the rest."""
        total = 0
        for name in os.listdir(self._dir):
            segment = _segment_of(name)
            if segment is None or segment not in lengths:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self._dir)
                continue
            try:
                total += self._trim_to(name, lengths[segment])
            except PlantedFile:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self._dir)  # a link or a stranger's file: never read
            except OSError:
                continue
        with self._lock:
            self._bytes = total

    def _trim_to(self, name: str, length: int) -> int:
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dir)
        try:
            size = _check_private(fd, name).st_size
            if size > length:
                os.ftruncate(fd, length)
                size = length
        finally:
            os.close(fd)
        return size

    def count(self) -> None:
        """Count what the files take (a reader that does not reconcile)."""
        total = 0
        for name in os.listdir(self._dir):
            with contextlib.suppress(OSError):
                total += os.stat(name, dir_fd=self._dir, follow_symlinks=False).st_size
        with self._lock:
            self._bytes = total


def _segment_of(name: str) -> int | None:
    stem = name.removesuffix(SUFFIX)
    if stem == name or not stem.isdigit():
        return None
    return int(stem)
