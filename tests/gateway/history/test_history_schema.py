"""Schema 5 keeps only the indexes a query needs: a schema-4 file is upgraded in place, its
rows and every listing unchanged, and the queries that relied on an index still find one."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from tests.gateway.history.history_support import T0, Clock, raw_db
from zodex_gateway.history import DB_NAME, HISTORY_SCHEMA, HistoryStore
from zodex_gateway.history.calls import finish, insert
from zodex_gateway.history.query import InvocationFilter, select_invocations
from zodex_gateway.history.records import INCOMPLETE, RUNTIME_STOPPED, CallOutcome
from zodex_gateway.history.schema import _MIGRATIONS

SCHEMA_5_INDEXES = {
    "invocations_started",
    "invocations_agent",
    "invocations_pending",
    "invocations_handle",
    "file_changes_size",
    "processes_running",
    "output_chunks_size",
    "output_segments_handle",
}

# Every filter of `zodex local history` and of the observer's listings.
FILTERS: list[InvocationFilter] = [
    {},
    {"last": 3},
    {"workdir": "/w/one"},
    {"workdir": "/real/two", "last": 2},
    {"agent_id": "aaaa"},
    {"agent_id": "none"},
    {"session_handle": "h1"},
    {"since": T0 + 5},
    {"since_or_pending": T0 + 9},
    {"before": (T0 + 6, "")},
]


def make_version_4(directory: Path) -> None:
    """A history as schema 4 wrote it, every index in place: calls in two workdirs (one
    declared through a symlink), with and without an agent, some with a session, one left
    pending by a runtime that stopped."""
    directory.mkdir(parents=True)
    with closing(sqlite3.connect(directory / DB_NAME, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN")
        for version in range(1, 5):
            _MIGRATIONS[version](conn)
        conn.execute("PRAGMA user_version = 4")
        conn.execute("INSERT INTO agents VALUES ('aaaa', 'k1', NULL, ?, ?)", (T0, T0))
        for n in range(12):
            declared, real = ("/w/one", "/w/one") if n % 2 else ("/link/two", "/real/two")
            invocation, _ = insert(
                conn,
                T0 + n,
                {
                    "agent_id": "aaaa" if n % 3 else None,
                    "tool_name": "exec_command",
                    "args": {"cmd": f"echo {n}", "workdir": declared},
                    "declared_workdir": declared,
                    "real_workdir": real,
                },
            )
            if n != 10:
                outcome: CallOutcome = {
                    "ok": True,
                    "result": {"output": f"{n}\n"},
                    "session_handle": f"h{n % 4}",
                }
                finish(conn, invocation, T0 + n + 0.5, outcome)
        conn.execute("COMMIT")
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"invocations_status", "invocations_size", "invocations_real_workdir"} <= indexes


def listings(conn: sqlite3.Connection) -> list[list[tuple[str, str, str | None]]]:
    found = []
    for match in FILTERS:
        conn.execute("BEGIN")
        rows = select_invocations(conn, **match)
        conn.execute("COMMIT")
        found.append([(inv.id, inv.status, inv.session_handle) for inv in rows])
    return found


def plan(conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()) -> str:
    return " / ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_a_schema_4_file_is_upgraded_in_place_and_reads_the_same(history_dir: Path) -> None:
    make_version_4(history_dir)
    with raw_db(history_dir) as conn:
        before = listings(conn)
    assert [len(rows) for rows in before] == [12, 3, 6, 2, 8, 4, 3, 7, 3, 6]
    # A reader first (`zodex local history` while an older runtime ran): it upgrades too,
    # and leaves the pending call alone.
    with HistoryStore(history_dir, recover=False) as reader:
        assert [inv.status for inv in reader.invocations(since_or_pending=T0 + 100)] == ["pending"]
    with raw_db(history_dir) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == HISTORY_SCHEMA == 5
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert indexes - {name for name in indexes if name.startswith("sqlite_autoindex")} == SCHEMA_5_INDEXES
        assert listings(conn) == before
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    with HistoryStore(history_dir, clock=Clock(T0 + 100)) as store:  # the owner: recovers
        assert store.invocations(since_or_pending=T0 + 100) == []
        stopped = [inv for inv in store.invocations() if inv.status == INCOMPLETE]
        assert [(inv.started_at, inv.incomplete_reason) for inv in stopped] == [(T0 + 10, RUNTIME_STOPPED)]
        assert store.trim_marker() == (12, 0)
        # New calls go on from where the old ones left off.
        invocation = store.begin(
            agent_id="aaaa",
            tool_name="exec_command",
            args={},
            declared_workdir="/w/one",
            real_workdir="/w/one",
        )
        assert store.trim_marker() == (13, 1)
        assert [inv.id for inv in store.invocations(since_or_pending=T0 + 1000)] == [invocation]
        store.complete(invocation, ok=True, result={}, session_handle="h1")
        assert [inv.id for inv in store.invocations(session_handle="h1")][-1] == invocation
        assert len(store.invocations(workdir="/w/one")) == 7


def test_the_queries_that_had_an_index_still_use_one(store: HistoryStore, history_dir: Path) -> None:
    with raw_db(history_dir) as conn:
        # Pending calls: recovery, the trim's marker, the timeline's pending ones.
        assert "USING COVERING INDEX invocations_pending" in plan(
            conn, "SELECT 1 FROM invocations WHERE status = 'pending' LIMIT 1"
        )
        assert "INDEX invocations_pending" in plan(
            conn, "UPDATE invocations SET status = 'incomplete' WHERE status = 'pending'"
        )
        # A session's calls (output cap, retention, the observer).
        assert "INDEX invocations_handle (session_handle=?)" in plan(
            conn, "SELECT 1 FROM invocations WHERE session_handle = ? LIMIT 1", ("h",)
        )
        # A workdir's newest calls walk the started_at index from the newest, to the page asked.
        assert "invocations_started" in plan(
            conn,
            "SELECT id FROM invocations WHERE (declared_workdir = ? OR real_workdir = ?)"
            " ORDER BY started_at DESC, seq DESC LIMIT 20",
            ("/w", "/w"),
        )
