"""Reading invocations back, with the filters of ``zodex local history``."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from typing import Any, Final, TypedDict, Unpack

from zodex_gateway.history.codec import load_json
from zodex_gateway.history.ids import NO_AGENT
from zodex_gateway.history.records import FileChange, Invocation

# The columns are named as the record's fields.
_FIELDS: Final = tuple(field.name for field in dataclasses.fields(Invocation) if field.name != "files")
_COLUMNS: Final = ", ".join(_FIELDS)
# Stays well under SQLite's limit on bound parameters.
_IDS_PER_QUERY: Final = 500


class InvocationFilter(TypedDict, total=False):
    """What a listing of invocations may be narrowed by; written once, for the store's
    facade and the query alike."""

    last: int | None
    since: float | None
    agent_id: str | None
    workdir: str | None
    invocation_id: str | None
    session_handle: str | None
    before: tuple[float, str] | None
    since_or_pending: float | None


def select_invocations(conn: sqlite3.Connection, **match: Unpack[InvocationFilter]) -> list[Invocation]:
    """Matching invocations, oldest first; ``last`` keeps the newest N of them.
    ``agent_id`` :data:`~zodex_gateway.history.ids.NO_AGENT` keeps the calls with no agent.

    ``before`` = ``(started_at, id)`` keeps those strictly older in that order (a page
    cursor); ``since_or_pending`` keeps those started at or after it plus every call still
    pending."""
    last, since, agent_id = match.get("last"), match.get("since"), match.get("agent_id")
    workdir, invocation_id = match.get("workdir"), match.get("invocation_id")
    session_handle, before = match.get("session_handle"), match.get("before")
    since_or_pending = match.get("since_or_pending")
    if last is not None and last < 0:
        raise ValueError(f"last must be ≥ 0, got {last}")
    where: list[str] = []
    params: list[Any] = []
    if since is not None:
        where.append("started_at >= ?")
        params.append(since)
    if agent_id == NO_AGENT:
        where.append("agent_id IS NULL")
    elif agent_id is not None:
        where.append("agent_id = ?")
        params.append(agent_id)
    if workdir is not None:
        where.append("(declared_workdir = ? OR real_workdir = ?)")
        params += [workdir, workdir]
    if invocation_id is not None:
        where.append("id = ?")
        params.append(invocation_id)
    if session_handle is not None:
        where.append("session_handle = ?")
        params.append(session_handle)
    if before is not None:
        # Ties on started_at fall back to arrival order, as the ORDER BY below does.
        where.append(
            "(started_at < ? OR (started_at = ? AND seq < (SELECT seq FROM invocations WHERE id = ?)))"
        )
        params += [before[0], before[0], before[1]]
    if since_or_pending is not None:
        where.append("(started_at >= ? OR status = 'pending')")
        params.append(since_or_pending)
    sql = f"SELECT {_COLUMNS} FROM invocations"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY started_at DESC, seq DESC"
    if last is not None:
        sql += " LIMIT ?"
        params.append(last)
    rows = conn.execute(sql, params).fetchall()
    rows.reverse()
    files = _file_changes(conn, [str(row[0]) for row in rows])
    return [_invocation(row, files.get(str(row[0]), ())) for row in rows]


def _file_changes(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, tuple[FileChange, ...]]:
    found: dict[str, list[FileChange]] = {}
    for start in range(0, len(ids), _IDS_PER_QUERY):
        part = ids[start : start + _IDS_PER_QUERY]
        marks = ", ".join("?" * len(part))
        rows = conn.execute(
            "SELECT invocation_id, operation, path, old_path, added, removed, diff FROM file_changes"
            f" WHERE invocation_id IN ({marks}) ORDER BY invocation_id, idx",
            part,
        )
        for inv_id, operation, path, old_path, added, removed, diff in rows:
            change = FileChange(operation, path, old_path, int(added), int(removed), tuple(load_json(diff)))
            found.setdefault(inv_id, []).append(change)
    return {key: tuple(value) for key, value in found.items()}


def _invocation(row: Sequence[Any], files: tuple[FileChange, ...]) -> Invocation:
    found = dict(zip(_FIELDS, row, strict=True))
    for name in ("args", "result"):
        found[name] = load_json(found[name])
    found["started_at"] = float(found["started_at"])
    if found["duration_ms"] is not None:
        found["duration_ms"] = int(found["duration_ms"])
    found["cross_agent"] = bool(found["cross_agent"])
    found["by_person"] = bool(found["by_person"])
    return Invocation(**found, files=files)
