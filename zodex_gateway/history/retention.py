"""Trimming history: whole invocations, oldest first; the newest and pending ones are kept.

Two limits (docs/history.md#retention): an age, applied at start and hourly, and a size,
the bytes on disk (the database, its WAL and the output segments), enforced as history is
written (:mod:`.size_limit`). A session's output goes with its rows: chunks, and segment
files (removed by the caller once the deletion is committed). Rows carry ``size``
(stored UTF-8 bytes plus a per-row allowance, see :mod:`.schema`): the size trim deletes
until these add up to the excess, then the caller gives the freed pages back and measures
the file again.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from zodex_gateway.history.records import OUTPUT_TRIMMED, PENDING

# A session whose invocations are all gone is kept this long after it ended: its exec
# call may still be about to complete and claim it.
ORPHAN_GRACE_S: Final = 3600.0

_CANDIDATES: Final = (
    "SELECT seq, id, session_handle, size FROM invocations"
    " WHERE seq != ? AND status != ? {extra} ORDER BY started_at, seq LIMIT ?"
)


def stored_bytes(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "SELECT (SELECT COALESCE(SUM(size), 0) FROM invocations)"
        " + (SELECT COALESCE(SUM(size), 0) FROM file_changes)"
        " + (SELECT COALESCE(SUM(size), 0) FROM processes)"
        " + (SELECT COALESCE(SUM(size), 0) FROM output_chunks WHERE segment IS NULL)"
        " + (SELECT COALESCE(SUM(file_bytes), 0) FROM output_segments)"
    ).fetchone()
    return int(row[0])


def _newest(conn: sqlite3.Connection) -> int:
    newest = conn.execute("SELECT seq FROM invocations ORDER BY started_at DESC, seq DESC LIMIT 1").fetchone()
    return -1 if newest is None else int(newest[0])


def age_step(conn: sqlite3.Connection, dead: list[int], *, max_age_s: float, now: float, budget: int) -> int:
    """Delete at most ``budget`` invocations older than ``max_age_s``; returns how many.
    ``dead`` gets the output segments to remove once this commits (as in every step here).

    Called in a write transaction; the caller commits between steps so a large trim never
    holds the write lock for long."""
    too_old = conn.execute(
        _CANDIDATES.format(extra="AND started_at < ?"), (_newest(conn), PENDING, now - max_age_s, budget)
    ).fetchall()
    for seq, inv_id, handle, size in too_old:
        _delete_invocation(conn, dead, seq, inv_id, handle, size)
    if len(too_old) < budget:
        drop_orphan_sessions(conn, dead, now)
    return len(too_old)


def size_step(conn: sqlite3.Connection, dead: list[int], *, excess: int, budget: int) -> int:
    """Delete the oldest invocations whose rows add up to ``excess`` bytes, at most
    ``budget`` of them; returns how many (0: only the newest and pending ones are left)."""
    rows = conn.execute(_CANDIDATES.format(extra=""), (_newest(conn), PENDING, budget)).fetchall()
    freed = 0
    deleted = 0
    for seq, inv_id, handle, size in rows:
        if freed >= excess:
            break
        freed += _delete_invocation(conn, dead, seq, inv_id, handle, size)
        deleted += 1
    return deleted


def trim_marker(conn: sqlite3.Connection) -> tuple[int, int]:
    """(newest seq, pending calls): while these stay the same, a size trim that found
    nothing to delete would find nothing again."""
    # 'pending' as a literal, so that the partial index of pending calls counts them.
    row = conn.execute(
        "SELECT COALESCE(MAX(seq), -1),"
        f" (SELECT COUNT(*) FROM invocations WHERE status = '{PENDING}') FROM invocations"
    ).fetchone()
    return int(row[0]), int(row[1])


def _delete_invocation(
    conn: sqlite3.Connection, dead: list[int], seq: int, inv_id: str, handle: str | None, size: int
) -> int:
    """Remove one invocation, its file evidence, and its session once nothing refers to
    it; returns the bytes freed."""
    freed = int(size)
    row = conn.execute("SELECT COALESCE(SUM(size), 0) FROM file_changes WHERE invocation_id = ?", (inv_id,))
    freed += int(row.fetchone()[0])
    conn.execute("DELETE FROM file_changes WHERE invocation_id = ?", (inv_id,))
    conn.execute("DELETE FROM invocations WHERE seq = ?", (seq,))
    if handle is not None:
        still_used = conn.execute("SELECT 1 FROM invocations WHERE session_handle = ? LIMIT 1", (handle,))
        if still_used.fetchone() is None:
            freed += _drop_session(conn, dead, handle)
    return freed


def _drop_session(conn: sqlite3.Connection, dead: list[int], handle: str) -> int:
    """Remove a session's output, and its row once the process ended. A process still
    running keeps its row, marked: what it prints next is not stored while no call refers
    to it (output_cap), where a new row would hold output nothing could ever trim."""
    chunks = conn.execute(
        "SELECT COALESCE(SUM(size), 0) FROM output_chunks WHERE handle = ? AND segment IS NULL", (handle,)
    )
    freed = int(chunks.fetchone()[0])
    conn.execute("DELETE FROM output_chunks WHERE handle = ?", (handle,))
    for segment, file_bytes in conn.execute(
        "DELETE FROM output_segments WHERE handle = ? RETURNING id, file_bytes", (handle,)
    ).fetchall():
        dead.append(int(segment))
        freed += int(file_bytes)
    running = conn.execute(
        "UPDATE processes SET output_bytes = 0, output_cut = 0, output_marker_seq = NULL,"
        " output_complete = 0, output_incomplete_reason = ? WHERE handle = ? AND ended_at IS NULL",
        (OUTPUT_TRIMMED, handle),
    )
    if running.rowcount == 0:
        process = conn.execute("SELECT COALESCE(SUM(size), 0) FROM processes WHERE handle = ?", (handle,))
        freed += int(process.fetchone()[0])
        conn.execute("DELETE FROM processes WHERE handle = ?", (handle,))
    return freed


def drop_orphan_sessions(conn: sqlite3.Connection, dead: list[int], now: float) -> None:
    """Sessions no invocation refers to, e.g. a command whose exec call was never
    completed and was then trimmed, or events that arrived for a call already removed."""
    orphans = conn.execute(
        "SELECT handle FROM processes AS p WHERE p.ended_at < ?"
        " AND NOT EXISTS (SELECT 1 FROM invocations AS i WHERE i.session_handle = p.handle)",
        (now - ORPHAN_GRACE_S,),
    ).fetchall()
    for (handle,) in orphans:
        _drop_session(conn, dead, handle)
