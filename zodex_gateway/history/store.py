"""The durable record of every tool call: one SQLite file in WAL mode, one connection.

Methods are plain synchronous calls, each one small transaction. A lock makes the store
safe to share with the thread that writes output batches. Writes start with
``BEGIN IMMEDIATE`` so that two processes sharing the file queue on the busy timeout
instead of failing to upgrade a read lock.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Unpack

from zodex_gateway.history import agents as agent_rows
from zodex_gateway.history import calls, output_cap, retention, sessions
from zodex_gateway.history.query import InvocationFilter, select_invocations
from zodex_gateway.history.records import (
    INCOMPLETE,
    PENDING,
    RUNTIME_STOPPED,
    AgentRecord,
    FileChange,
    HistoryUnavailable,
    Invocation,
)
from zodex_gateway.history.reserve import RESERVE_NAME, SpaceReserve, is_disk_full
from zodex_gateway.history.schema import HISTORY_SCHEMA, migrate
from zodex_gateway.history.size_limit import SizeLimit
from zodex_gateway.history.storage import (
    checkpoint,
    connect,
    counted_files,
    disk_bytes,
    is_incremental,
    make_incremental,
    vacuum_step,
)

log = logging.getLogger("zodex.gateway")

DEFAULT_BUSY_TIMEOUT_S: Final = 5.0
# Invocations per transaction while trimming: deleting a call with megabytes of output
# takes a few ms, and calls being recorded wait for the write lock meanwhile.
RETENTION_BATCH: Final = 64

# After a write: wake the trimming thread if over the size limit, trim at once (the
# output capture's thread), or nothing (the trim's own deletions).
SizeCheck = Literal["wake", "enforce", "none"]


def _one_line(text: str) -> str:
    return " ".join(text.split())


class HistoryStore:
    def __init__(
        self,
        directory: Path,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        recover: bool = True,
        max_bytes: int | None = None,
        output_cap_bytes: int | None = None,
    ) -> None:
        """Open or create the history in ``directory`` and migrate it.

        With ``recover`` (the runtime that owns the history), calls left pending and
        processes left running by a crashed runtime are closed with a reason, and a file
        made before incremental vacuum is switched to it (one VACUUM). A reader such as
        ``zodex local history`` passes ``recover=False`` so that it never marks a live
        runtime's calls incomplete. ``max_bytes``: the size on disk kept as history is
        written (:mod:`.size_limit`); ``output_cap_bytes``: the most output stored per
        command (:mod:`.output_cap`). Raises :class:`HistoryUnavailable`.
        """
        self._lock = threading.Lock()
        self._clock = clock
        self._reserve = SpaceReserve(directory / RESERVE_NAME)
        self._directory = directory
        self._counted = counted_files(directory)
        self._busy_timeout_ms = round(busy_timeout_s * 1000)
        self._output_cap = output_cap_bytes
        self._limit = SizeLimit(self, max_bytes)
        try:
            self._conn: sqlite3.Connection | None = connect(directory, busy_timeout_s=busy_timeout_s)
        except (OSError, sqlite3.Error) as exc:
            raise HistoryUnavailable(_one_line(f"history cannot open {directory}: {exc}")) from exc
        try:
            with self._read("history cannot read its schema: {error}") as conn:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version != HISTORY_SCHEMA:
                with self._write("history cannot prepare its database: {error}") as conn:
                    migrate(conn)
            if recover:
                self._recover()
                self._reserve.ensure()  # the owner keeps room to complete calls on a full disk
                self._switch_to_incremental_vacuum()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._limit.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- transactions ---------------------------------------------------------------

    @contextmanager
    def _write(self, failure: str, size_check: SizeCheck = "wake") -> Iterator[sqlite3.Connection]:
        """One write transaction; any SQLite error becomes HistoryUnavailable(``failure``
        with ``{error}`` filled in). Once committed, the size limit is checked."""
        with self._lock, self._transaction("BEGIN IMMEDIATE", failure) as conn:
            yield conn
        if size_check == "wake":
            self._limit.wrote()
        elif size_check == "enforce":
            self._limit.enforce()

    @contextmanager
    def _read(self, failure: str) -> Iterator[sqlite3.Connection]:
        # A read transaction: several SELECTs see one snapshot.
        with self._lock, self._transaction("BEGIN", failure) as conn:
            yield conn

    @contextmanager
    def _transaction(self, begin: str, failure: str) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        if conn is None:
            raise HistoryUnavailable(failure.replace("{error}", "history is closed"), "history is closed")
        try:
            conn.execute(begin)
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # the original error is the one worth reporting
                raise
        except sqlite3.Error as exc:
            cause = _one_line(str(exc))
            raise HistoryUnavailable(_one_line(failure.replace("{error}", cause)), cause) from exc

    def _essential(self, write: Callable[[], None]) -> None:
        """A write that must not be lost to a full disk: if the disk is full, give up the
        reserved space and try once more (docs/history.md#recording)."""
        try:
            write()
        except HistoryUnavailable as exc:
            if not is_disk_full(exc.__cause__) or not self._reserve.release():
                raise
            log.warning("history: the disk is full; using the space kept for completing calls")
            write()

    def _recover(self) -> None:
        now = self._clock()
        with self._read("history cannot be read: {error}") as conn:
            pending = conn.execute(
                "SELECT 1 FROM invocations WHERE status = ? LIMIT 1", (PENDING,)
            ).fetchone()
            running = sessions.any_running(conn)
        if pending is None and not running:
            return  # the usual case: no write lock taken just to open
        try:
            with self._write("history cannot close calls left by a stopped runtime: {error}") as conn:
                conn.execute(
                    "UPDATE invocations SET status = ?, incomplete_reason = ? WHERE status = ?",
                    (INCOMPLETE, RUNTIME_STOPPED, PENDING),
                )
                sessions.end_running_as_lost(conn, now)
        except HistoryUnavailable as exc:
            log.warning("%s", exc)  # a read-only history still opens for reading

    # -- agents (docs/agents.md#identity) -----------------------------------------------------------

    def agent_for(self, identity_key: str) -> AgentRecord:
        """The agent of an identity key, created on first sight; updates ``last_seen``.
        Concurrent first calls, from this process or another, agree on one agent."""
        now = self._clock()
        with self._write("history cannot record the calling agent: {error}") as conn:
            return agent_rows.get_or_create(conn, identity_key, now)

    def agent(self, agent_id: str) -> AgentRecord | None:
        with self._read("history cannot be read: {error}") as conn:
            return agent_rows.by_id(conn, agent_id)

    def agents(self) -> list[AgentRecord]:
        with self._read("history cannot be read: {error}") as conn:
            return agent_rows.every(conn)

    def set_alias(self, agent_id: str, alias: str | None) -> AgentRecord:
        """Last write wins; ``None`` or ``""`` clears. Validation is the caller's (docs/tools.md#set_agent_alias).
        Raises KeyError for an unknown agent."""
        with self._write("history cannot store the alias: {error}") as conn:
            record = agent_rows.set_alias(conn, agent_id, alias)
        if record is None:
            raise KeyError(agent_id)
        return record

    # -- invocations ----------------------------------------------------------------

    def begin(
        self,
        *,
        agent_id: str | None,
        tool_name: str,
        args: dict[str, Any],
        declared_workdir: str | None,
        real_workdir: str | None,
        session_handle: str | None = None,
    ) -> str:
        """Record a call before its side effect; returns its id. With ``session_handle``
        (write_stdin) the session's creator is looked up and compared with the caller.
        Raises HistoryUnavailable, and then the call must not run."""
        now = self._clock()
        with self._write("history cannot record this call (disk full?): {error}; nothing was run") as conn:
            invocation = calls.insert(
                conn,
                now=now,
                agent_id=agent_id,
                tool_name=tool_name,
                args=args,
                declared_workdir=declared_workdir,
                real_workdir=real_workdir,
                session_handle=session_handle,
            )
        self._reserve.ensure()  # made again once a full disk has room
        return invocation

    def complete(
        self,
        invocation_id: str,
        *,
        ok: bool,
        result: Any,
        error: str | None = None,
        session_handle: str | None = None,
        files: Sequence[FileChange] = (),
    ) -> None:
        """Record the outcome. ``session_handle`` is the handle an exec_command created:
        it makes this call's agent the session's creator. A call already completed, or
        removed meanwhile (retention, clear), is left alone; one that a reopening marked
        incomplete while it was in fact still running is completed normally."""
        now = self._clock()

        def write() -> None:
            with self._write(f"history cannot complete call {invocation_id}: " + "{error}") as conn:
                calls.finish(
                    conn,
                    invocation_id,
                    now=now,
                    ok=ok,
                    result=result,
                    error=error,
                    session_handle=session_handle,
                    files=files,
                )

        self._essential(write)

    def invocations(self, **match: Unpack[InvocationFilter]) -> list[Invocation]:
        """Matching invocations, newest last; ``workdir`` matches declared or real. See
        :func:`select_invocations` for ``before`` and ``since_or_pending``."""
        with self._read("history cannot be read: {error}") as conn:
            return select_invocations(conn, **match)

    def invocation(self, invocation_id: str) -> Invocation | None:
        found = self.invocations(invocation_id=invocation_id)
        return found[0] if found else None

    def counts(self) -> tuple[int, int]:
        """(agents, invocations) stored."""
        with self._read("history cannot be read: {error}") as conn:
            agents = int(conn.execute("SELECT COUNT(*) FROM agents").fetchone()[0])
            invocations = int(conn.execute("SELECT COUNT(*) FROM invocations").fetchone()[0])
        return agents, invocations

    def agent_workdirs(self, agent_id: str) -> list[str]:
        """The real workdirs an agent has used, most recently used first."""
        with self._read("history cannot be read: {error}") as conn:
            rows = conn.execute(
                "SELECT real_workdir FROM invocations WHERE agent_id = ? AND real_workdir IS NOT NULL"
                " GROUP BY real_workdir ORDER BY MAX(started_at) DESC",
                (agent_id,),
            )
            return [str(row[0]) for row in rows]

    def running_by_agent(self, agent_id: str | None = None) -> dict[str, int]:
        """Running processes per creating agent."""
        with self._read("history cannot be read: {error}") as conn:
            return sessions.running_by_agent(conn, agent_id)

    def processes_changed_since(self, since: float) -> list[str]:
        """Handles of processes running now or ended at or after ``since``."""
        with self._read("history cannot be read: {error}") as conn:
            return sessions.changed_since(conn, since)

    # -- processes and output (from the workers' event streams) ------------------------

    def process_started(
        self,
        handle: str,
        *,
        pid: int,
        cmd: str,
        cwd: str,
        started_at: float,
        invocation_id: str | None = None,
    ) -> None:
        """``invocation_id``: the exec call that started it, when the worker echoes it."""

        def write() -> None:
            with self._write("history cannot record a process start: {error}") as conn:
                sessions.started(
                    conn,
                    handle,
                    pid=pid,
                    cmd=cmd,
                    cwd=cwd,
                    started_at=started_at,
                    invocation_id=invocation_id,
                )

        self._essential(write)

    def process_ended(
        self, handle: str, *, exit_code: int, signal: str | None, reason: str, ended_at: float
    ) -> None:
        def write() -> None:
            with self._write("history cannot record a process end: {error}") as conn:
                sessions.ended(
                    conn, handle, exit_code=exit_code, signal=signal, reason=reason, ended_at=ended_at
                )

        self._essential(write)

    def append_output(self, batch: Sequence[tuple[str, str]]) -> None:
        """Store ``(handle, raw text)`` pieces, in arrival order, in one transaction.
        Refused while the space kept for completing calls is spent (a full disk)."""
        if self._reserve.spent:
            raise HistoryUnavailable(
                "history cannot store command output: the disk is full", cause="the disk is full"
            )
        rows = sessions.merge_output(batch)
        if not rows:
            return
        with self._write("history cannot store command output: {error}", "enforce") as conn:
            output_cap.append(conn, rows, self._output_cap)

    def mark_output_incomplete(self, handle: str, reason: str) -> None:
        """The capture of this session missed output; the first reason given is kept."""

        def write() -> None:
            with self._write("history cannot record an output gap: {error}") as conn:
                sessions.mark_incomplete(conn, handle, reason)

        self._essential(write)

    def output(self, handle: str) -> tuple[str, bool]:
        """The session's full raw output and whether it was captured completely."""
        with self._read("history cannot be read: {error}") as conn:
            return sessions.output(conn, handle)

    def output_tail(self, handle: str, max_chars: int) -> tuple[str, bool]:
        """At least the last ``max_chars`` raw characters, and whether older ones were left out."""
        with self._read("history cannot be read: {error}") as conn:
            return sessions.output_tail(conn, handle, max_chars)

    def process(self, handle: str) -> dict[str, Any] | None:
        with self._read("history cannot be read: {error}") as conn:
            return sessions.process(conn, handle)

    # -- retention and size ------------------------------------------------------------

    def stored_bytes(self) -> int:
        """The stored bytes plus per-row allowances: what deleting everything would free."""
        with self._read("history cannot be read: {error}") as conn:
            return retention.stored_bytes(conn)

    def apply_retention(self, *, max_age_s: float, max_bytes: int, now: float | None = None) -> int:
        """Delete whole invocations, oldest first, until none is older than ``max_age_s``
        and the history takes at most ``max_bytes`` on disk (database plus WAL); the newest
        and pending ones are always kept. Returns how many were deleted. Works in
        batches, releasing the write lock in between, and ends with the WAL checkpointed
        and truncated and the freed pages given back."""
        when = self._clock() if now is None else now
        deleted = 0
        while True:
            with self._write("history cannot remove old records: {error}", "none") as conn:
                count = retention.age_step(conn, max_age_s=max_age_s, now=when, budget=RETENTION_BATCH)
            deleted += count
            if count < RETENTION_BATCH:
                break
        return deleted + self._limit.enforce(max_bytes)

    def disk_bytes(self) -> int:
        """Bytes the history takes on disk: the database file and its WAL."""
        return disk_bytes(self._counted)

    def compact(self) -> tuple[bool, int]:
        """Give free pages back to the file system, in steps, and checkpoint the WAL,
        truncating it. Returns (WAL truncated, bytes still free): the WAL stays when
        another process's reader holds it; pages stay free in a file without incremental
        vacuum."""
        while True:
            with self._lock:
                conn = self._conn
                if conn is None:
                    raise HistoryUnavailable("history is closed", "history is closed")
                try:
                    freed, free = vacuum_step(conn)
                    truncated = checkpoint(conn, busy_timeout_ms=self._busy_timeout_ms)
                except sqlite3.Error as exc:
                    cause = _one_line(str(exc))
                    raise HistoryUnavailable(f"history cannot compact itself: {cause}", cause) from exc
            if not truncated or not freed or not free:
                return truncated, free

    def trim_marker(self) -> tuple[int, int]:
        with self._read("history cannot be read: {error}") as conn:
            return retention.trim_marker(conn)

    def trim_oldest(self, excess: int) -> int:
        """Delete the oldest invocations (never the newest or a pending one) whose rows
        add up to ``excess`` bytes, at most one batch; returns how many."""
        with self._write("history cannot remove old records: {error}", "none") as conn:
            return retention.size_step(conn, excess=excess, budget=RETENTION_BATCH)

    def _switch_to_incremental_vacuum(self) -> None:
        """A file made before incremental vacuum keeps freed pages forever: switch it once,
        after trimming it (VACUUM then has less to copy). If that fails (VACUUM needs as
        much free disk again), freed pages are still reused, and the next start retries."""
        with self._lock:
            if self._conn is None or is_incremental(self._conn):
                return
        self._limit.enforce()
        with self._lock:
            # Closed by another thread since the first look: mypy cannot know it changes.
            if self._conn is None:
                return  # type: ignore[unreachable]
            before = disk_bytes(self._counted)
            try:
                make_incremental(self._conn)
            except sqlite3.Error as exc:
                log.warning("history cannot switch to incremental vacuum: %s", _one_line(str(exc)))
                return
        log.info(
            "history switched to incremental vacuum (%d bytes before, %d after)", before, self.disk_bytes()
        )
