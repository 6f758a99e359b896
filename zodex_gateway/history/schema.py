"""The history database layout and its migrations, versioned with ``PRAGMA user_version``.

Every row carries ``size``: the UTF-8 bytes of its variable-length values plus a fixed
per-row allowance for SQLite's record and index overhead. The size limit itself is the
bytes on disk (:mod:`.size_limit`); these sums estimate what deleting rows frees.

Version 2 adds each session's output counters for the per-command output cap
(:mod:`.output_cap`). Version 3 stores new output in segment files (:mod:`.segments`):
``output_segments`` names them, and a chunk row gives the frame that holds its text. Version 4 marks the input
a person typed from a viewer (``by_person``; docs/history.md#who-typed). Version 5 keeps
only the indexes a query needs, so that recording a call writes fewer pages: every index of
``invocations`` is one more page in each commit's WAL frames (see :data:`_V5`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final

from zodex_gateway.history.records import HistoryUnavailable

# Measured roughly (schema 1): an invocation row plus its seven index entries took ~250
# bytes beyond its values; kept as the allowance, an estimate on the safe side since
# schema 5 dropped four of them. The smaller tables carry one or two indexes.
INVOCATION_OVERHEAD: Final = 256
ROW_OVERHEAD: Final = 64

_V1: Final = """
CREATE TABLE agents (
    agent_id   TEXT PRIMARY KEY,
    key_hash   TEXT NOT NULL UNIQUE,   -- SHA-256 of the identity key, never the key itself
    alias      TEXT,
    first_seen REAL NOT NULL,
    last_seen  REAL NOT NULL
);

CREATE TABLE invocations (
    seq               INTEGER PRIMARY KEY,   -- arrival order, breaks started_at ties
    id                TEXT NOT NULL UNIQUE,
    agent_id          TEXT,
    tool_name         TEXT NOT NULL,
    args              TEXT NOT NULL,         -- JSON
    declared_workdir  TEXT,
    real_workdir      TEXT,
    status            TEXT NOT NULL,
    started_at        REAL NOT NULL,
    duration_ms       INTEGER,
    result            TEXT,                  -- JSON, NULL while pending
    error             TEXT,
    session_handle    TEXT,
    handle_creator    TEXT,
    cross_agent       INTEGER NOT NULL DEFAULT 0,
    incomplete_reason TEXT,
    size              INTEGER NOT NULL
);
CREATE INDEX invocations_started ON invocations (started_at, seq);
CREATE INDEX invocations_agent ON invocations (agent_id, started_at);
CREATE INDEX invocations_declared_workdir ON invocations (declared_workdir);
CREATE INDEX invocations_real_workdir ON invocations (real_workdir);
CREATE INDEX invocations_handle ON invocations (session_handle);
CREATE INDEX invocations_status ON invocations (status);
-- Covers SUM(size), so measuring history never reads the stored values.
CREATE INDEX invocations_size ON invocations (size);

CREATE TABLE file_changes (
    invocation_id TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    operation     TEXT NOT NULL,
    path          TEXT NOT NULL,
    old_path      TEXT,
    added         INTEGER NOT NULL,
    removed       INTEGER NOT NULL,
    diff          TEXT NOT NULL,             -- JSON array of rows
    size          INTEGER NOT NULL,
    PRIMARY KEY (invocation_id, idx)
);
CREATE INDEX file_changes_size ON file_changes (invocation_id, size);

-- One row per session handle: the process lifecycle from the worker's events, and the
-- creator (the exec_command call that got this handle), known once that call completes.
CREATE TABLE processes (
    handle                   TEXT PRIMARY KEY,
    creator_agent_id         TEXT,
    creator_invocation_id    TEXT,
    pid                      INTEGER,
    cmd                      TEXT,
    cwd                      TEXT,
    started_at               REAL,
    ended_at                 REAL,
    exit_code                INTEGER,
    signal                   TEXT,
    reason                   TEXT,
    output_complete          INTEGER NOT NULL DEFAULT 1,
    output_incomplete_reason TEXT,
    size                     INTEGER NOT NULL DEFAULT 64
);
CREATE INDEX processes_running ON processes (ended_at, started_at);

CREATE TABLE output_chunks (
    handle TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    text   TEXT NOT NULL,                    -- raw decoded stream, escapes intact
    size   INTEGER NOT NULL,
    PRIMARY KEY (handle, seq)
);
CREATE INDEX output_chunks_size ON output_chunks (handle, size);
"""

_V2: Final = """
ALTER TABLE processes ADD COLUMN output_bytes INTEGER NOT NULL DEFAULT 0;   -- stored, marker not counted
ALTER TABLE processes ADD COLUMN output_cut INTEGER NOT NULL DEFAULT 0;     -- bytes left out
ALTER TABLE processes ADD COLUMN output_marker_seq INTEGER;                 -- the cut marker's chunk
UPDATE processes SET output_bytes =
    (SELECT COALESCE(SUM(size), 0) FROM output_chunks AS c WHERE c.handle = processes.handle)
"""

_V3: Final = """
CREATE TABLE output_segments (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,   -- never reused: the file is output/<id>.zst
    handle     TEXT NOT NULL,
    text_bytes INTEGER NOT NULL,                    -- UTF-8 bytes its frames hold
    file_bytes INTEGER NOT NULL                     -- its committed length
);
CREATE INDEX output_segments_handle ON output_segments (handle, id);
ALTER TABLE output_chunks ADD COLUMN segment INTEGER;        -- NULL: the text is in the row
ALTER TABLE output_chunks ADD COLUMN frame_at INTEGER;
ALTER TABLE output_chunks ADD COLUMN frame_bytes INTEGER
"""

_V4: Final = """
ALTER TABLE invocations ADD COLUMN by_person INTEGER NOT NULL DEFAULT 0
"""

# Recording a trivial call wrote ten pages to the WAL at its begin and five at its
# completion (one per b-tree it touched); now six and two. Dropped: the two workdir
# indexes (`--workdir` walks the started_at index newest first instead, stopping at the
# page it asked for), the size index (the size limit measures the files, not SUM(size)).
# Narrowed to the rows their queries look for: the status index to pending calls (a
# completion no longer moves its entry), the handle index to calls with a handle
# (``session_handle = ?`` implies IS NOT NULL, so SQLite still uses it). Queries on status
# name 'pending' as a literal, a term SQLite matches to the partial index as it prepares
# the statement (a bound value only by preparing it again, which older versions do not).
_V5: Final = """
DROP INDEX invocations_declared_workdir;
DROP INDEX invocations_real_workdir;
DROP INDEX invocations_size;
DROP INDEX invocations_status;
DROP INDEX invocations_handle;
CREATE INDEX invocations_pending ON invocations (status) WHERE status = 'pending';
CREATE INDEX invocations_handle ON invocations (session_handle) WHERE session_handle IS NOT NULL
"""

HISTORY_SCHEMA: Final = 5

_MIGRATIONS: Final[dict[int, Callable[[sqlite3.Connection], None]]] = {
    1: lambda conn: _run_script(conn, _V1),
    2: lambda conn: _run_script(conn, _V2),
    3: lambda conn: _run_script(conn, _V3),
    4: lambda conn: _run_script(conn, _V4),
    5: lambda conn: _run_script(conn, _V5),
}


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    # executescript() would commit the caller's transaction; run statement by statement
    # (no statement or comment above contains a semicolon of its own).
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to :data:`HISTORY_SCHEMA`; the caller holds a write transaction,
    so two processes opening a fresh file at once migrate it once."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > HISTORY_SCHEMA:
        raise HistoryUnavailable(
            f"history was written by a newer Zodex (schema {version}, this one reads {HISTORY_SCHEMA})"
        )
    for target in range(version + 1, HISTORY_SCHEMA + 1):
        _MIGRATIONS[target](conn)
        conn.execute(f"PRAGMA user_version = {target}")
