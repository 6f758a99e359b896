"""Agent rows (docs/agents.md#identity): a random short id per identity key, stored only as a hash."""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from zodex_gateway.history.ids import key_hash, new_agent_id
from zodex_gateway.history.records import AgentRecord

_COLUMNS: Final = "agent_id, alias, first_seen, last_seen"
_ID_ATTEMPTS: Final = 64  # 36⁴ ids: a collision is rare, a full id space should fail, not spin


def _record(row: Any) -> AgentRecord:
    return AgentRecord(row[0], row[1], float(row[2]), float(row[3]))


def get_or_create(conn: sqlite3.Connection, identity_key: str, now: float) -> AgentRecord:
    """Call in a write transaction: the look-up and the insert must not interleave with
    another connection's, or two first calls would make two agents."""
    digest = key_hash(identity_key)
    row = conn.execute(f"SELECT {_COLUMNS} FROM agents WHERE key_hash = ?", (digest,)).fetchone()
    if row is not None:
        last_seen = max(float(row[3]), now)
        conn.execute("UPDATE agents SET last_seen = ? WHERE agent_id = ?", (last_seen, row[0]))
        return AgentRecord(row[0], row[1], float(row[2]), last_seen)
    for _ in range(_ID_ATTEMPTS):
        agent_id = new_agent_id()
        # The key is known absent (the write lock is ours): an ignored insert means a taken id.
        inserted = conn.execute(
            "INSERT OR IGNORE INTO agents (agent_id, key_hash, alias, first_seen, last_seen)"
            " VALUES (?, ?, NULL, ?, ?)",
            (agent_id, digest, now, now),
        )
        if inserted.rowcount == 1:
            return AgentRecord(agent_id, None, now, now)
    raise sqlite3.IntegrityError("no free agent id found")


def by_id(conn: sqlite3.Connection, agent_id: str) -> AgentRecord | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
    return None if row is None else _record(row)


def every(conn: sqlite3.Connection) -> list[AgentRecord]:
    return [
        _record(row) for row in conn.execute(f"SELECT {_COLUMNS} FROM agents ORDER BY first_seen, agent_id")
    ]


def set_alias(conn: sqlite3.Connection, agent_id: str, alias: str | None) -> AgentRecord | None:
    conn.execute("UPDATE agents SET alias = ? WHERE agent_id = ?", (alias or None, agent_id))
    return by_id(conn, agent_id)
