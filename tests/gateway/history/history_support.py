"""Shared pieces of the history tests: a settable clock and a raw look at the file."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from zodex_gateway.history import DB_NAME, HistoryStore

DAY = 86_400.0
T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


class Clock:
    """Time that moves only when a test says so."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@contextmanager
def raw_db(directory: Path) -> Iterator[sqlite3.Connection]:
    """A second, plain connection to the history file (as another process would have)."""
    with closing(sqlite3.connect(directory / DB_NAME, isolation_level=None)) as conn:
        yield conn


def count_rows(directory: Path, table: str) -> int:
    with raw_db(directory) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def exec_call(
    store: HistoryStore,
    *,
    agent_id: str | None,
    cmd: str = "echo hi",
    workdir: str = "/work/project",
    handle: str | None = None,
    result: Any = None,
) -> str:
    """A completed exec_command invocation that created ``handle`` (when given)."""
    invocation_id = store.begin(
        agent_id=agent_id,
        tool_name="exec_command",
        args={"cmd": cmd, "workdir": workdir},
        declared_workdir=workdir,
        real_workdir=workdir,
    )
    if result is None:
        result = {"summary": "exited 0 after 0.1s", "status": "exited", "output": "hi\n", "exit_code": 0}
    store.complete(invocation_id, ok=True, result=result, session_handle=handle)
    return invocation_id
