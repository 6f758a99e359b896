"""A session's stored output: ``output_chunks`` rows whose text lies in segment files.

A row with ``segment`` NULL holds its text itself (a chunk under :data:`INLINE_BYTES`, the
output cap's marker, and output a schema-2 history stored); any other row names the frame
that holds it. A row's
``size`` is the UTF-8 bytes it stands for: the frame's content, less the start the output
cap dropped (:func:`cut_start`), so a row always reads as the last ``size`` bytes of its
frame.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from zodex_gateway.history.codec import storable_text
from zodex_gateway.history.segments import SEGMENT_TEXT_BYTES, SegmentFiles, compress

# Output pieces of one handle that arrive together are stored as one row, up to this
# many characters: far fewer rows than events, and small enough that cutting the start of
# a capped command's tail rewrites little (see output_cap).
MAX_CHUNK_CHARS: Final = 64 * 1024
# A batch this large is a flood the capture's writer is catching up with: compressing it
# would take the CPU the command and its worker need (zstd costs more than all of
# history's other work on such output), so its frames are stored as they are.
FLOOD_CHARS: Final = 128 * 1024
# So is a batch holding one event this large even when the writer keeps up: a worker
# sends an event per 64 KiB read or 20 ms, so half of that in one event is output at
# 1.6 MB/s or more (`seq` arrives as 64 KiB events; compressing them took about 30 ms of
# the gateway's CPU per million lines on a busy machine).
FLOOD_EVENT_CHARS: Final = 32 * 1024
# A chunk smaller than this (a prompt, a few lines) stays in its row: a frame and a file
# write per handle and batch cost more than the row's page does.
INLINE_BYTES: Final = 4096

_ROW: Final = "SELECT text, size, segment, frame_at, frame_bytes FROM output_chunks WHERE handle = ?"


@dataclass(frozen=True)
class Piece:
    """Output ready to store: text, its UTF-8 size, and its frame (compressed ahead, off the
    store's lock; None once the cap cut the text)."""

    handle: str
    text: str
    size: int
    frame: bytes | None


def merge_output(batch: Sequence[tuple[str, str]]) -> list[Piece]:
    """Consecutive pieces of one handle joined, up to :data:`MAX_CHUNK_CHARS`, compressed
    unless the batch is a flood's (:data:`FLOOD_CHARS`, :data:`FLOOD_EVENT_CHARS`)."""
    lengths = [len(text) for _, text in batch]
    fast = bool(lengths) and (sum(lengths) >= FLOOD_CHARS or max(lengths) >= FLOOD_EVENT_CHARS)
    pieces: list[Piece] = []
    handle: str | None = None
    parts: list[str] = []
    length = 0

    def flush() -> None:
        if handle is not None and parts:
            text = "".join(parts)
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                text, _ = storable_text(text)
                data = text.encode("utf-8")
            frame = compress(data, fast=fast) if len(data) >= INLINE_BYTES else None
            pieces.append(Piece(handle, text, len(data), frame))

    for piece_handle, text in batch:
        if not text:
            continue
        if piece_handle != handle or length + len(text) > MAX_CHUNK_CHARS:
            flush()
            handle, parts, length = piece_handle, [], 0
        parts.append(text)
        length += len(text)
    flush()
    return pieces


@dataclass
class _Segment:
    id: int
    fd: int
    length: int  # now
    committed: int  # when this transaction opened it (0 for a new one)
    text_bytes: int
    new: bool


@dataclass
class ChunkWriter:
    """One write transaction's output: frames appended to segments, rows inserted. Once the
    transaction ends, :meth:`close` keeps the appends (committed) or cuts them off."""

    conn: sqlite3.Connection
    files: SegmentFiles
    segment_bytes: int = SEGMENT_TEXT_BYTES  # text per segment (segments.segment_text_bytes)
    dead: list[int] = field(default_factory=list)  # segments to remove once committed
    _open: dict[str, _Segment] = field(default_factory=dict)
    _done: list[_Segment] = field(default_factory=list)

    def insert(self, handle: str, seq: int, piece: Piece) -> None:
        if piece.size < INLINE_BYTES:
            self.conn.execute(
                "INSERT INTO output_chunks (handle, seq, text, size) VALUES (?, ?, ?, ?)",
                (handle, seq, piece.text, piece.size),
            )
            return
        frame = piece.frame
        if frame is None:
            frame = compress(piece.text.encode("utf-8"))
        segment = self._segment(handle)
        at = segment.length
        self.files.append(segment.fd, frame)
        segment.length += len(frame)
        segment.text_bytes += piece.size
        self.conn.execute(
            "INSERT INTO output_chunks (handle, seq, text, size, segment, frame_at, frame_bytes)"
            " VALUES (?, ?, '', ?, ?, ?, ?)",
            (handle, seq, piece.size, segment.id, at, len(frame)),
        )

    def _segment(self, handle: str) -> _Segment:
        segment = self._open.get(handle)
        if segment is not None and segment.text_bytes < self.segment_bytes:
            return segment
        if segment is not None:
            self._save(segment)
            segment = None
        else:
            row = self.conn.execute(
                "SELECT id, text_bytes, file_bytes FROM output_segments WHERE handle = ? ORDER BY id DESC LIMIT 1",
                (handle,),
            ).fetchone()
            if row is not None and int(row[1]) < self.segment_bytes:
                segment = self._reopen(int(row[0]), int(row[2]), int(row[1]))
        if segment is None:
            cursor = self.conn.execute(
                "INSERT INTO output_segments (handle, text_bytes, file_bytes) VALUES (?, 0, 0)", (handle,)
            )
            assert cursor.lastrowid is not None
            fd, _ = self.files.open_for_append(cursor.lastrowid, new=True)
            segment = _Segment(cursor.lastrowid, fd, 0, 0, 0, new=True)
        self._open[handle] = segment
        return segment

    def _reopen(self, segment_id: int, committed: int, text_bytes: int) -> _Segment | None:
        """The session's current segment, to append to; None when it is gone or shorter than
        its row says (damaged): the session then starts a new one."""
        try:
            fd, length = self.files.open_for_append(segment_id, new=False)
        except FileNotFoundError:
            return None
        if length < committed:
            self.files.release(segment_id, fd, keep=False)
            return None
        if length > committed:
            try:
                self.files.truncate(fd, committed)  # what a failed append left
            except BaseException:
                self.files.release(segment_id, fd, keep=False)
                raise
        return _Segment(segment_id, fd, committed, committed, text_bytes, new=False)

    def _save(self, segment: _Segment) -> None:
        self.conn.execute(
            "UPDATE output_segments SET text_bytes = ?, file_bytes = ? WHERE id = ?",
            (segment.text_bytes, segment.length, segment.id),
        )
        self._done.append(segment)

    def drop_unused(self, handle: str) -> None:
        """After chunks of ``handle`` were deleted: its segments no chunk needs any more."""
        current = self._open.get(handle)
        rows = self.conn.execute(
            "DELETE FROM output_segments WHERE handle = ? AND id != ? AND NOT EXISTS (SELECT 1"
            " FROM output_chunks AS c WHERE c.handle = output_segments.handle AND c.segment = output_segments.id)"
            " RETURNING id",
            (handle, -1 if current is None else current.id),
        ).fetchall()
        self.dead += [int(row[0]) for row in rows]

    def save(self) -> None:
        """Within the transaction, before it commits: the segments' new lengths."""
        for segment in list(self._open.values()):
            self._save(segment)
        self._open.clear()

    def close(self, committed: bool) -> None:
        self._done += self._open.values()  # none left once saved; all, if the write failed
        self._open.clear()
        for segment in self._done:
            if not committed:
                with contextlib.suppress(OSError):
                    self.files.truncate(segment.fd, segment.committed)
            # Kept open for the session's next batch unless it is full or was not kept.
            full = segment.text_bytes >= self.segment_bytes
            self.files.release(segment.id, segment.fd, keep=committed and not full)
            if not committed and segment.new:
                self.files.remove([segment.id])
        self._done.clear()
        if committed:
            self.files.remove(self.dead)


def cut_start(files: SegmentFiles, row: Any, excess: int) -> str | int:
    """A chunk less its first ``excess`` bytes (never splitting a character): the new text
    of a row holding its own, the new size of one in a segment."""
    text, size, segment, at, length = row
    if segment is None:
        return text.encode("utf-8")[excess - size :].decode("utf-8", "ignore") if excess < size else ""
    data = files.read(segment, at, length)
    if data is None:
        return 0
    kept = data[len(data) - size + excess :]
    while kept and kept[0] & 0xC0 == 0x80:  # a continuation byte: that character goes too
        kept = kept[1:]
    return len(kept)


def _text(files: SegmentFiles, row: Any) -> str | None:
    text, size, segment, at, length = row
    if segment is None:
        return str(text)
    data = files.read(segment, at, length)
    if data is None or len(data) < size:
        return None
    try:
        return data[len(data) - size :].decode("utf-8")
    except UnicodeDecodeError:
        return None


def output(conn: sqlite3.Connection, files: SegmentFiles, handle: str) -> tuple[str, bool]:
    """The session's stored text, and whether it is complete (captured whole, and every
    chunk still readable)."""
    parts: list[str] = []
    readable = True
    for row in conn.execute(_ROW + " ORDER BY seq", (handle,)):
        text = _text(files, row)
        readable = readable and text is not None
        parts.append(text or "")
    found = conn.execute("SELECT output_complete FROM processes WHERE handle = ?", (handle,)).fetchone()
    return "".join(parts), readable and (found is None or bool(found[0]))


def output_tail(
    conn: sqlite3.Connection, files: SegmentFiles, handle: str, max_chars: int
) -> tuple[str, bool]:
    """At least the last ``max_chars`` characters of the output (whole stored chunks, newest
    last), and whether anything older was left out. Reads only the chunks it needs."""
    parts: list[str] = []
    length = 0
    cut = False
    for row in conn.execute(_ROW + " ORDER BY seq DESC", (handle,)):
        if length >= max_chars:
            cut = True
            break
        text = _text(files, row) or ""
        parts.append(text)
        length += len(text)
    parts.reverse()
    return "".join(parts), cut
