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


def append(conn: sqlite3.Connection, rows: Sequence[tuple[str, str, int]], cap: int | None) -> None:
    """Store ``(handle, text, UTF-8 size)`` rows in order, keeping each session within
    ``cap`` bytes (None: no cap). Called in a write transaction."""
    sessions: dict[str, _Session] = {}
    for handle, text, size in rows:
        session = sessions.get(handle)
        if session is None:
            session = sessions[handle] = _load(conn, handle)
        if session.unclaimed:
            continue
        if cap is None:
            _insert(conn, session, text, size)
        else:
            _add(conn, session, text, size, cap)
    for session in sessions.values():
        if not session.unclaimed:
            _save(conn, session, cap)


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


def _insert(conn: sqlite3.Connection, session: _Session, text: str, size: int) -> None:
    conn.execute(
        "INSERT INTO output_chunks (handle, seq, text, size) VALUES (?, ?, ?, ?)",
        (session.handle, session.next_seq, text, size),
    )
    session.next_seq += 1
    session.stored += size


def _add(conn: sqlite3.Connection, session: _Session, text: str, size: int, cap: int) -> None:
    head, tail = head_and_tail(cap)
    if session.marker_seq is None:
        room = head - (session.stored + session.cut)
        if size <= room:
            _insert(conn, session, text, size)
            return
        if room > 0:
            first = _first_bytes(text, room)
            _insert(conn, session, first, _utf8(first))
            text = text[len(first) :]
            size = _utf8(text)
        session.marker_seq = session.next_seq  # the head is full: the marker's slot
        session.next_seq += 1
        if not text:
            return
    if size > tail:
        # This piece alone fills the tail: everything older in the tail goes.
        kept = _last_bytes(text, tail)
        kept_size = _utf8(kept)
        _note_cut(session, size - kept_size)
        text, size = kept, kept_size
        _drop_oldest_tail(conn, session, session.stored)
    _insert(conn, session, text, size)
    if session.stored > cap:
        _drop_oldest_tail(conn, session, session.stored - cap)


def _drop_oldest_tail(conn: sqlite3.Connection, session: _Session, excess: int) -> None:
    """Remove ``excess`` bytes from the start of the tail (the chunks after the marker)."""
    while excess > 0:
        rows = conn.execute(
            "SELECT seq, text, size FROM output_chunks WHERE handle = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session.handle, session.marker_seq, _TRIM_ROWS),
        ).fetchall()
        if not rows:
            return
        for seq, text, size in rows:
            if size <= excess:
                conn.execute("DELETE FROM output_chunks WHERE handle = ? AND seq = ?", (session.handle, seq))
                dropped = int(size)
            else:
                kept = _last_bytes(text, int(size) - excess)
                kept_size = _utf8(kept)
                conn.execute(
                    "UPDATE output_chunks SET text = ?, size = ? WHERE handle = ? AND seq = ?",
                    (kept, kept_size, session.handle, seq),
                )
                dropped = int(size) - kept_size
            session.stored -= dropped
            _note_cut(session, dropped)
            excess -= dropped
            if excess <= 0:
                return


def _note_cut(session: _Session, dropped: int) -> None:
    if dropped > 0:
        session.cut += dropped
        session.cut_grew = True


def _save(conn: sqlite3.Connection, session: _Session, cap: int | None) -> None:
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
