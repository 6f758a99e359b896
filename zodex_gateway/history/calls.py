"""Invocation rows: inserted pending before the side effect, finished after it."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

from zodex_gateway.history import sessions
from zodex_gateway.history.codec import dump_json, utf8_size
from zodex_gateway.history.ids import new_invocation_id
from zodex_gateway.history.records import ERROR, INCOMPLETE, OK, PENDING, CallOutcome, CallStart, FileChange
from zodex_gateway.history.schema import INVOCATION_OVERHEAD, ROW_OVERHEAD

_ID_ATTEMPTS: Final = 64  # ids rarely collide; a pathological clock should fail, not spin


def insert(conn: sqlite3.Connection, now: float, call: CallStart, *, seen: bool = True) -> tuple[str, int]:
    """The new pending call's id, and its row's size. ``seen``: the call moves its agent's
    ``last_seen`` (the store does that at most once a second per agent)."""
    agent_id, tool_name, args = call["agent_id"], call["tool_name"], call["args"]
    declared_workdir, real_workdir = call["declared_workdir"], call["real_workdir"]
    session_handle = call.get("session_handle")
    by_person = bool(call.get("by_person", False))
    if agent_id is not None and seen:
        # A call is the agent being seen: callers need not write agent_for() every time.
        conn.execute("UPDATE agents SET last_seen = MAX(last_seen, ?) WHERE agent_id = ?", (now, agent_id))
    args_json, args_size = dump_json(args)
    size = (
        INVOCATION_OVERHEAD + args_size + utf8_size(tool_name) + utf8_size(agent_id)
        + utf8_size(declared_workdir) + utf8_size(real_workdir) + utf8_size(session_handle)
    )  # fmt: skip
    creator: str | None = None
    cross_agent = False
    if session_handle is not None:
        known = sessions.creator(conn, session_handle)
        if known is not None:
            creator = known.agent_id
            # A person types into the session of its creator's column, not across agents.
            cross_agent = creator != agent_id and not by_person
    for _ in range(_ID_ATTEMPTS):
        invocation_id = new_invocation_id(now)
        try:
            conn.execute(
                "INSERT INTO invocations (id, agent_id, tool_name, args, declared_workdir, real_workdir,"
                " status, started_at, session_handle, handle_creator, cross_agent, size, by_person)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    invocation_id,
                    agent_id,
                    tool_name,
                    args_json,
                    declared_workdir,
                    real_workdir,
                    PENDING,
                    now,
                    session_handle,
                    creator,
                    int(cross_agent),
                    size,
                    int(by_person),
                ),
            )
        except sqlite3.IntegrityError:
            continue  # the same id drawn twice in one millisecond
        return invocation_id, size
    raise sqlite3.IntegrityError("no free invocation id found")


def finish(conn: sqlite3.Connection, invocation_id: str, now: float, outcome: CallOutcome) -> int:
    """The bytes of values it wrote (0: the call was already completed or is gone): the
    whole row, since an UPDATE rewrites it with its arguments, and the file changes."""
    ok, result, error = outcome["ok"], outcome["result"], outcome.get("error")
    session_handle = outcome.get("session_handle")
    row = conn.execute(
        "SELECT agent_id, started_at, session_handle, status, size FROM invocations WHERE id = ?",
        (invocation_id,),
    ).fetchone()
    if row is None or row[3] not in (PENDING, INCOMPLETE):
        return 0
    agent_id, started_at, handle, _, size = row
    result_json, added = (None, 0) if result is None else dump_json(result)
    added += utf8_size(error)
    if handle is None and session_handle is not None:
        # Only a call that targeted no session at begin() can have created one.
        handle = session_handle
        sessions.claim(conn, handle, agent_id=agent_id, invocation_id=invocation_id)
        added += utf8_size(handle)
    files = _insert_files(conn, invocation_id, outcome.get("files", ()))
    conn.execute(
        "UPDATE invocations SET status = ?, duration_ms = ?, result = ?, error = ?, session_handle = ?,"
        " incomplete_reason = NULL, size = size + ? WHERE id = ?",
        (
            OK if ok else ERROR,
            max(0, round((now - float(started_at)) * 1000)),
            result_json,
            error,
            handle,
            added,
            invocation_id,
        ),
    )
    return int(size) + added + files


def _insert_files(conn: sqlite3.Connection, invocation_id: str, files: Sequence[FileChange]) -> int:
    """The rows' sizes, summed."""
    rows = []
    total = 0
    for idx, change in enumerate(files):
        diff_json, diff_size = dump_json(list(change.diff))
        size = (
            ROW_OVERHEAD
            + diff_size
            + sum(utf8_size(v) for v in (change.operation, change.path, change.old_path))
        )
        what = (change.operation, change.path, change.old_path, change.added, change.removed)
        rows.append((invocation_id, idx, *what, diff_json, size))
        total += size
    if not rows:
        return 0
    conn.executemany(
        "INSERT INTO file_changes (invocation_id, idx, operation, path, old_path, added, removed, diff, size)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    return total
