"""At most a cap of each command's output in history: its first quarter and its last three
quarters, with a marker where the middle was cut (docs/history.md#recording).

A command printing 500 MB thus stores the cap (``output.spill-cap``, 16 MiB by default),
however long it runs. The head is filled first; once it is full, one chunk slot is kept
free after it for the marker, and everything later is the tail, whose oldest bytes are
dropped as new ones arrive. Sizes are UTF-8 bytes; a cut never splits a character.

A session's counters live in its ``processes`` row: ``output_bytes`` stored (the marker not
counted), ``output_cut`` bytes left out, and ``output_marker_seq``, the marker's slot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from zodex_gateway.history.chunks import ChunkWriter, Piece, cut_start
from zodex_gateway.history.records import OUTPUT_TRIMMED
from zodex_gateway.history.schema import ROW_OVERHEAD

MARKER: Final = (
    "\n[zodex: {cut} bytes of output cut here; history keeps the first {head} and the last {tail}"
    " bytes of each command's output]\n"
)
_TRIM_ROWS: Final = 16  # chunk rows read at a time while dropping the tail's oldest bytes


def head_and_tail(cap: int) -> tuple[int, int]:
    head = cap // 4
    return head, cap - head


def marker(cut: int, cap: int) -> str:
    head, tail = head_and_tail(cap)
    return MARKER.format(cut=f"{cut:,}", head=f"{head:,}", tail=f"{tail:,}")


@dataclass
class _Session:
    handle: str
    stored: int
    cut: int
    marker_seq: int | None
    next_seq: int
    # Its calls were trimmed while it ran and none refers to it since: nothing is stored.
    unclaimed: bool = False
    cut_grew: bool = False
    dropped: bool = False  # chunks were deleted: segments may have emptied


def append(writer: ChunkWriter, pieces: Sequence[Piece], cap: int | None) -> None:
    """Store ``pieces`` in order, keeping each session within ``cap`` bytes (None: no
    cap). Called in a write transaction."""
    conn = writer.conn
    sessions: dict[str, _Session] = {}
    for piece in pieces:
        session = sessions.get(piece.handle)
        if session is None:
            session = sessions[piece.handle] = _load(conn, piece.handle)
        if session.unclaimed:
            continue
        if cap is None:
            _insert(writer, session, piece)
        else:
            _add(writer, session, piece, cap)
    for session in sessions.values():
        if not session.unclaimed:
            _save(writer, session, cap)


def _load(conn: sqlite3.Connection, handle: str) -> _Session:
    row = conn.execute(
        "SELECT output_bytes, output_cut, output_marker_seq, output_incomplete_reason FROM processes"
        " WHERE handle = ?",
        (handle,),
    ).fetchone()
    stored, cut, marker_seq = (0, 0, None) if row is None else (int(row[0]), int(row[1]), row[2])
    top = conn.execute("SELECT MAX(seq) FROM output_chunks WHERE handle = ?", (handle,)).fetchone()[0]
    next_seq = 0 if top is None else int(top) + 1
    if marker_seq is not None:
        next_seq = max(next_seq, int(marker_seq) + 1)
    unclaimed = row is not None and row[3] == OUTPUT_TRIMMED and not _referred_to(conn, handle)
    return _Session(handle, stored, cut, marker_seq, next_seq, unclaimed=unclaimed)


def _referred_to(conn: sqlite3.Connection, handle: str) -> bool:
    found = conn.execute("SELECT 1 FROM invocations WHERE session_handle = ? LIMIT 1", (handle,))
    return found.fetchone() is not None


def _insert(writer: ChunkWriter, session: _Session, piece: Piece) -> None:
    writer.insert(session.handle, session.next_seq, piece)
    session.next_seq += 1
    session.stored += piece.size


def _add(writer: ChunkWriter, session: _Session, piece: Piece, cap: int) -> None:
    head, tail = head_and_tail(cap)
    text, size = piece.text, piece.size
    if session.marker_seq is None:
        room = head - (session.stored + session.cut)
        if size <= room:
            _insert(writer, session, piece)
            return
        if room > 0:
            first = _first_bytes(text, room)
            _insert(writer, session, Piece(session.handle, first, _utf8(first), None))
            text = text[len(first) :]
            size = _utf8(text)
        session.marker_seq = session.next_seq  # the head is full: the marker's slot
        session.next_seq += 1
        if not text:
            return
        piece = Piece(session.handle, text, size, None)
    if size > tail:
        # This piece alone fills the tail: everything older in the tail goes.
        kept = _last_bytes(text, tail)
        kept_size = _utf8(kept)
        _note_cut(session, size - kept_size)
        piece = Piece(session.handle, kept, kept_size, None)
        _drop_oldest_tail(writer, session, session.stored)
    _insert(writer, session, piece)
    if session.stored > cap:
        _drop_oldest_tail(writer, session, session.stored - cap)


def _drop_oldest_tail(writer: ChunkWriter, session: _Session, excess: int) -> None:
    """Remove ``excess`` bytes from the start of the tail (the chunks after the marker)."""
    conn = writer.conn
    session.dropped = True
    while excess > 0:
        rows = conn.execute(
            "SELECT seq, text, size, segment, frame_at, frame_bytes FROM output_chunks"
            " WHERE handle = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session.handle, session.marker_seq, _TRIM_ROWS),
        ).fetchall()
        if not rows:
            return
        for seq, *row in rows:
            size = int(row[1])
            kept = cut_start(writer.files, row, excess) if size > excess else 0
            kept_size = _utf8(kept) if isinstance(kept, str) else kept
            if kept_size == 0:
                conn.execute("DELETE FROM output_chunks WHERE handle = ? AND seq = ?", (session.handle, seq))
            else:
                text = kept if isinstance(kept, str) else row[0]
                conn.execute(
                    "UPDATE output_chunks SET text = ?, size = ? WHERE handle = ? AND seq = ?",
                    (text, kept_size, session.handle, seq),
                )
            dropped = size - kept_size
            session.stored -= dropped
            _note_cut(session, dropped)
            excess -= dropped
            if excess <= 0:
                return


def _note_cut(session: _Session, dropped: int) -> None:
    if dropped > 0:
        session.cut += dropped
        session.cut_grew = True


def _save(writer: ChunkWriter, session: _Session, cap: int | None) -> None:
    conn = writer.conn
    conn.execute(
        "INSERT INTO processes (handle, output_bytes, output_cut, output_marker_seq, size) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (handle) DO UPDATE SET output_bytes = excluded.output_bytes,"
        " output_cut = excluded.output_cut, output_marker_seq = excluded.output_marker_seq",
        (session.handle, session.stored, session.cut, session.marker_seq, ROW_OVERHEAD),
    )
    if session.cut_grew and cap is not None and session.marker_seq is not None:
        text = marker(session.cut, cap)
        conn.execute(
            "INSERT OR REPLACE INTO output_chunks (handle, seq, text, size) VALUES (?, ?, ?, ?)",
            (session.handle, session.marker_seq, text, _utf8(text)),
        )
    if session.dropped:
        writer.drop_unused(session.handle)


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def _first_bytes(text: str, limit: int) -> str:
    """The longest start of ``text`` within ``limit`` UTF-8 bytes."""
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


def _last_bytes(text: str, limit: int) -> str:
    """The longest end of ``text`` within ``limit`` UTF-8 bytes."""
    if limit <= 0:
        return ""
    return text.encode("utf-8")[-limit:].decode("utf-8", "ignore")
