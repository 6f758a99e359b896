"""Durable history of every tool call (Local mode): agents, invocations, sessions, output.

:class:`HistoryStore` owns one SQLite file (WAL) in a ``0700`` directory, and command
output in zstd segment files beside it (:mod:`.segments`); every write is one short
transaction and every failure surfaces as :class:`HistoryUnavailable`. Retention deletes
rows and segments together (:mod:`.retention`), until the files fit the size limit. Opening with
``recover=True`` (the runtime) closes calls and processes a crashed runtime left open;
readers pass ``recover=False``. :mod:`.render` formats invocations for
``zodex local history``.
"""

from zodex_gateway.history.ids import NO_AGENT, agent_matches
from zodex_gateway.history.records import (
    BY_MODEL,
    BY_PERSON,
    ERROR,
    INCOMPLETE,
    OK,
    PENDING,
    AgentRecord,
    FileChange,
    HistoryUnavailable,
    Invocation,
)
from zodex_gateway.history.schema import HISTORY_SCHEMA
from zodex_gateway.history.storage import DB_NAME, clear_history
from zodex_gateway.history.store import HistoryStore

__all__ = [
    "BY_MODEL",
    "BY_PERSON",
    "DB_NAME",
    "ERROR",
    "HISTORY_SCHEMA",
    "INCOMPLETE",
    "NO_AGENT",
    "OK",
    "PENDING",
    "AgentRecord",
    "FileChange",
    "HistoryStore",
    "HistoryUnavailable",
    "Invocation",
    "agent_matches",
    "clear_history",
]
