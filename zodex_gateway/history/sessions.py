"""Sessions in history: who created each handle, and its process lifecycle (its output:
:mod:`.chunks`).

Rows are keyed by handle and written by upsert, because the worker's events (started,
output, ended) and the exec call's completion (which names the creator) arrive in any
order.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from zodex_gateway.history.codec import utf8_size
from zodex_gateway.history.records import OUTPUT_LOST, PROCESS_LOST, ProcessEnd, ProcessStart
from zodex_gateway.history.schema import ROW_OVERHEAD


@dataclass(frozen=True)
class Creator:
    agent_id: str | None
    invocation_id: str


def creator(conn: sqlite3.Connection, handle: str) -> Creator | None:
    row = conn.execute(
        "SELECT creator_agent_id, creator_invocation_id FROM processes WHERE handle = ?", (handle,)
    ).fetchone()
    if row is None or row[1] is None:
        return None
    return Creator(row[0], row[1])


def claim(conn: sqlite3.Connection, handle: str, *, agent_id: str | None, invocation_id: str) -> None:
    """Make ``invocation_id`` the creator of ``handle``, unless another call already is."""
    conn.execute(
        "INSERT INTO processes (handle, creator_agent_id, creator_invocation_id, size) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (handle) DO UPDATE SET creator_agent_id = excluded.creator_agent_id,"
        " creator_invocation_id = excluded.creator_invocation_id WHERE creator_invocation_id IS NULL",
        (handle, agent_id, invocation_id, ROW_OVERHEAD),
    )


def started(conn: sqlite3.Connection, handle: str, start: ProcessStart) -> None:
    """With ``invocation_id`` (the exec call, echoed by the worker), the creator is known
    from the start, before that call returns the handle."""
    pid, cmd, cwd, started_at = start["pid"], start["cmd"], start["cwd"], start["started_at"]
    invocation_id = start.get("invocation_id")
    size = ROW_OVERHEAD + utf8_size(cmd) + utf8_size(cwd)
    conn.execute(
        "INSERT INTO processes (handle, pid, cmd, cwd, started_at, size) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (handle) DO UPDATE SET pid = excluded.pid, cmd = excluded.cmd, cwd = excluded.cwd,"
        " started_at = excluded.started_at, size = excluded.size",
        (handle, pid, cmd, cwd, started_at, size),
    )
    if invocation_id is not None:
        row = conn.execute(
            "SELECT agent_id FROM invocations WHERE id = ? AND tool_name = 'exec_command'", (invocation_id,)
        ).fetchone()
        if row is not None:
            claim(conn, handle, agent_id=row[0], invocation_id=invocation_id)


def ended(conn: sqlite3.Connection, handle: str, end: ProcessEnd) -> None:
    # Also overwrites a "lost" ending written by a runtime that opened the file meanwhile.
    conn.execute(
        "INSERT INTO processes (handle, ended_at, exit_code, signal, reason, size) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (handle) DO UPDATE SET ended_at = excluded.ended_at, exit_code = excluded.exit_code,"
        " signal = excluded.signal, reason = excluded.reason",
        (handle, end["ended_at"], end["exit_code"], end["signal"], end["reason"], ROW_OVERHEAD),
    )


def any_running(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM processes WHERE ended_at IS NULL AND started_at IS NOT NULL LIMIT 1"
    ).fetchone()
    return row is not None


def end_running_as_lost(conn: sqlite3.Connection, now: float) -> None:
    """Processes a stopped runtime never saw end: their end time is when we noticed."""
    conn.execute(
        "UPDATE processes SET ended_at = ?, reason = ?, output_complete = 0,"
        " output_incomplete_reason = COALESCE(output_incomplete_reason, ?)"
        " WHERE ended_at IS NULL AND started_at IS NOT NULL",
        (now, PROCESS_LOST, OUTPUT_LOST),
    )


def mark_incomplete(conn: sqlite3.Connection, handle: str, reason: str) -> None:
    conn.execute(
        "INSERT INTO processes (handle, output_complete, output_incomplete_reason, size) VALUES (?, 0, ?, ?)"
        " ON CONFLICT (handle) DO UPDATE SET output_complete = 0,"
        " output_incomplete_reason = COALESCE(output_incomplete_reason, excluded.output_incomplete_reason)",
        (handle, reason, ROW_OVERHEAD),
    )


def changed_since(conn: sqlite3.Connection, since: float) -> list[str]:
    """Handles whose process is running, or ended at or after ``since``."""
    rows = conn.execute(
        "SELECT handle FROM processes WHERE (ended_at IS NULL AND started_at IS NOT NULL) OR ended_at >= ?",
        (since,),
    )
    return [str(row[0]) for row in rows]


def running_by_agent(conn: sqlite3.Connection, agent_id: str | None = None) -> dict[str, int]:
    """Running processes per creating agent (all agents, or just ``agent_id``)."""
    sql = (
        "SELECT creator_agent_id, COUNT(*) FROM processes"
        " WHERE ended_at IS NULL AND started_at IS NOT NULL AND creator_agent_id IS NOT NULL"
    )
    params: tuple[str, ...] = ()
    if agent_id is not None:
        sql += " AND creator_agent_id = ?"
        params = (agent_id,)
    return {str(row[0]): int(row[1]) for row in conn.execute(sql + " GROUP BY creator_agent_id", params)}


_PROCESS_FIELDS: Final = (
    "pid",
    "cmd",
    "cwd",
    "started_at",
    "ended_at",
    "exit_code",
    "signal",
    "reason",
    "output_complete",
    "output_incomplete_reason",
    "output_cut",
    "creator_agent_id",
    "creator_invocation_id",
)


def process(conn: sqlite3.Connection, handle: str) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {', '.join(_PROCESS_FIELDS)} FROM processes WHERE handle = ?", (handle,)
    ).fetchone()
    if row is None:
        return None
    found = dict(zip(_PROCESS_FIELDS, row, strict=True))
    found["output_complete"] = bool(found["output_complete"])
    return found
