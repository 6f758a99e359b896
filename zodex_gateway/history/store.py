"""The durable record of every tool call: calls and metadata in one SQLite file (WAL, one
connection, :mod:`.database`), command output in segment files beside it (:mod:`.segments`).

Methods are plain synchronous calls, each one small transaction, safe to share with the
thread that writes output batches.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Unpack

from zodex_gateway.history import agents as agent_rows
from zodex_gateway.history import calls, chunks, output_cap, retention, sessions
from zodex_gateway.history.chunks import ChunkWriter
from zodex_gateway.history.codec import utf8_size
from zodex_gateway.history.database import Database, SizeCheck, one_line
from zodex_gateway.history.query import InvocationFilter, select_invocations
from zodex_gateway.history.records import (
    INCOMPLETE,
    PENDING,
    RUNTIME_STOPPED,
    AgentRecord,
    CallOutcome,
    CallStart,
    HistoryUnavailable,
    Invocation,
    ProcessEnd,
    ProcessStart,
)
from zodex_gateway.history.reserve import RESERVE_NAME, SpaceReserve
from zodex_gateway.history.schema import HISTORY_SCHEMA, migrate
from zodex_gateway.history.segments import SegmentFiles, segment_text_bytes
from zodex_gateway.history.size_limit import SizeLimit, written_at_most
from zodex_gateway.history.storage import counted_files, disk_bytes, is_incremental, make_incremental

log = logging.getLogger("zodex.gateway")

DEFAULT_BUSY_TIMEOUT_S: Final = 5.0
# Invocations per transaction while trimming: deleting a call with megabytes of output
# takes a few ms, and calls being recorded wait for the write lock meanwhile.
RETENTION_BATCH: Final = 64
_BEGIN_FAILURE: Final = "history cannot record this call (disk full?): {error}; nothing was run"
# An agent's last_seen is written at most this often by one store: each write is a
# statement and a page of the WAL in the pending write before the call runs.
LAST_SEEN_EVERY_S: Final = 1.0
# The agents whose last write is remembered; past that the memory starts afresh (each then
# writes once more).
_SEEN_REMEMBERED: Final = 1024


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
        self._clock = clock
        self._seen_written: dict[str, float] = {}  # agent id → the last_seen this store wrote
        self._reserve = SpaceReserve(directory / RESERVE_NAME)
        self._counted = counted_files(directory)
        self._output_cap = output_cap_bytes
        self._limit = SizeLimit(self, max_bytes)
        self._db = Database(
            directory, busy_timeout_s=busy_timeout_s, reserve=self._reserve, after_write=self._check_size
        )
        try:
            self._files = SegmentFiles(directory)
        except BaseException:
            self._db.close()
            raise
        try:
            with self._db.read("history cannot read its schema: {error}") as conn:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version != HISTORY_SCHEMA:
                with self._db.write("history cannot prepare its database: {error}") as conn:
                    migrate(conn)
            if recover:
                self._recover()
                self._reserve.ensure()  # the owner keeps room to complete calls on a full disk
                self._switch_to_incremental_vacuum()
            else:
                self._files.count()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._limit.close()
        self._db.close()
        self._files.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _check_size(self, size_check: SizeCheck) -> None:
        if size_check == "wake":
            self._limit.wrote(written_at_most(0))  # an agent, an alias: a few small values
        elif size_check == "enforce":
            self._limit.enforce()

    def _recover(self) -> None:
        now = self._clock()
        with self._db.read() as conn:
            # 'pending' as a literal, as the partial index names it (schema.py, _V5).
            pending = conn.execute(f"SELECT 1 FROM invocations WHERE status = '{PENDING}' LIMIT 1").fetchone()
            running = sessions.any_running(conn)
        try:
            # Under the write lock: no other process is between an append and its commit.
            with self._db.write("history cannot tidy its output files: {error}", "none") as conn:
                lengths = conn.execute("SELECT id, file_bytes FROM output_segments").fetchall()
                self._files.reconcile({int(segment): int(length) for segment, length in lengths})
            if pending is None and not running:
                return
            # Rewriting the rows rewrites their arguments too: measure, and trim, after it.
            failure = "history cannot close calls left by a stopped runtime: {error}"
            with self._db.write(failure, "enforce") as conn:
                conn.execute(
                    f"UPDATE invocations SET status = ?, incomplete_reason = ? WHERE status = '{PENDING}'",
                    (INCOMPLETE, RUNTIME_STOPPED),
                )
                sessions.end_running_as_lost(conn, now)
        except HistoryUnavailable as exc:
            log.warning("%s", exc)  # a read-only history still opens for reading
            self._files.count()

    # -- agents (docs/agents.md#identity) -----------------------------------------------------------

    def agent_for(self, identity_key: str) -> AgentRecord:
        """The agent of an identity key, created on first sight; updates ``last_seen``.
        Concurrent first calls, from this process or another, agree on one agent."""
        now = self._clock()
        with self._db.write("history cannot record the calling agent: {error}") as conn:
            record = agent_rows.get_or_create(conn, identity_key, now)
        self._wrote_last_seen(record.agent_id, now)
        return record

    def _sees(self, agent_id: str, now: float) -> bool:
        """Whether a call at ``now`` writes its agent's ``last_seen``: not within a second
        after this store last did (a clock set back writes at once)."""
        last = self._seen_written.get(agent_id)
        return last is None or not 0 <= now - last < LAST_SEEN_EVERY_S

    def _wrote_last_seen(self, agent_id: str, now: float) -> None:
        if len(self._seen_written) >= _SEEN_REMEMBERED and agent_id not in self._seen_written:
            self._seen_written.clear()
        self._seen_written[agent_id] = now

    def agent(self, agent_id: str) -> AgentRecord | None:
        with self._db.read() as conn:
            return agent_rows.by_id(conn, agent_id)

    def agents(self) -> list[AgentRecord]:
        with self._db.read() as conn:
            return agent_rows.every(conn)

    def set_alias(self, agent_id: str, alias: str | None) -> AgentRecord:
        """Last write wins; ``None`` or ``""`` clears. Validation is the caller's (docs/tools.md#set_agent_alias).
        Raises KeyError for an unknown agent."""
        with self._db.write("history cannot store the alias: {error}") as conn:
            record = agent_rows.set_alias(conn, agent_id, alias)
        if record is None:
            raise KeyError(agent_id)
        return record

    # -- invocations ----------------------------------------------------------------

    def begin(self, **call: Unpack[CallStart]) -> str:
        """Record a call before its side effect; returns its id. With ``session_handle``
        (write_stdin) the session's creator is looked up and compared with the caller;
        ``by_person`` marks a person's input from a viewer.
        Raises HistoryUnavailable, and then the call must not run."""
        now = self._clock()
        agent_id = call["agent_id"]
        seen = agent_id is not None and self._sees(agent_id, now)
        invocation, size = self._db.run(_BEGIN_FAILURE, lambda conn: calls.insert(conn, now, call, seen=seen))
        if seen and agent_id is not None:
            self._wrote_last_seen(agent_id, now)
        self._limit.wrote(written_at_most(size))
        self._reserve.ensure()  # made again once a full disk has room
        return invocation

    def complete(self, invocation_id: str, **outcome: Unpack[CallOutcome]) -> None:
        """Record the outcome. ``session_handle`` is the handle an exec_command created:
        it makes this call's agent the session's creator. A call already completed, or
        removed meanwhile (retention, clear), is left alone; one that a reopening marked
        incomplete while it was in fact still running is completed normally."""
        now = self._clock()
        failure = f"history cannot complete call {invocation_id}: " + "{error}"
        written = self._db.essential(failure, lambda conn: calls.finish(conn, invocation_id, now, outcome))
        self._limit.wrote(written_at_most(written))

    def invocations(self, **match: Unpack[InvocationFilter]) -> list[Invocation]:
        """Matching invocations, newest last; ``workdir`` matches declared or real. See
        :func:`select_invocations` for ``before`` and ``since_or_pending``."""
        with self._db.read() as conn:
            return select_invocations(conn, **match)

    def invocation(self, invocation_id: str) -> Invocation | None:
        found = self.invocations(invocation_id=invocation_id)
        return found[0] if found else None

    def counts(self) -> tuple[int, int]:
        """(agents, invocations) stored."""
        with self._db.read() as conn:
            agents = int(conn.execute("SELECT COUNT(*) FROM agents").fetchone()[0])
            invocations = int(conn.execute("SELECT COUNT(*) FROM invocations").fetchone()[0])
        return agents, invocations

    def agent_workdirs(self, agent_id: str) -> list[str]:
        """The real workdirs an agent has used, most recently used first."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT real_workdir FROM invocations WHERE agent_id = ? AND real_workdir IS NOT NULL"
                " GROUP BY real_workdir ORDER BY MAX(started_at) DESC",
                (agent_id,),
            )
            return [str(row[0]) for row in rows]

    def running_by_agent(self, agent_id: str | None = None) -> dict[str, int]:
        """Running processes per creating agent."""
        with self._db.read() as conn:
            return sessions.running_by_agent(conn, agent_id)

    def processes_changed_since(self, since: float) -> list[str]:
        """Handles of processes running now or ended at or after ``since``."""
        with self._db.read() as conn:
            return sessions.changed_since(conn, since)

    # -- processes and output (from the workers' event streams) ------------------------

    def process_started(self, handle: str, **start: Unpack[ProcessStart]) -> None:
        """``invocation_id``: the exec call that started it, when the worker echoes it."""
        failure = "history cannot record a process start: {error}"
        self._db.essential(failure, lambda conn: sessions.started(conn, handle, start))
        self._limit.wrote(written_at_most(utf8_size(start["cmd"]) + utf8_size(start["cwd"])))

    def process_ended(self, handle: str, **end: Unpack[ProcessEnd]) -> None:
        failure = "history cannot record a process end: {error}"
        self._db.essential(failure, lambda conn: sessions.ended(conn, handle, end))
        self._limit.wrote(written_at_most(utf8_size(end["signal"]) + utf8_size(end["reason"])))

    def append_output(self, batch: Sequence[tuple[str, str]]) -> None:
        """Store ``(handle, raw text)`` pieces, in arrival order, in one transaction: each
        chunk's frame appended to its segment file, then its row. Refused while the space
        kept for completing calls is spent (a full disk)."""
        if self._reserve.spent:
            raise HistoryUnavailable(
                "history cannot store command output: the disk is full", cause="the disk is full"
            )
        pieces = chunks.merge_output(batch)  # compressed here, before taking the lock
        if not pieces:
            return
        committed = False
        writer: ChunkWriter | None = None
        try:
            with self._db.write("history cannot store command output: {error}", "enforce") as conn:
                writer = ChunkWriter(conn, self._files, segment_text_bytes(self._output_cap))
                output_cap.append(writer, pieces, self._output_cap)
                writer.save()
            committed = True
        except OSError as exc:
            cause = one_line(exc.strerror or str(exc))
            raise HistoryUnavailable(f"history cannot store command output: {cause}", cause) from exc
        finally:
            if writer is not None:
                writer.close(committed)

    def mark_output_incomplete(self, handle: str, reason: str) -> None:
        """The capture of this session missed output; the first reason given is kept."""
        failure = "history cannot record an output gap: {error}"
        self._db.essential(failure, lambda conn: sessions.mark_incomplete(conn, handle, reason))
        self._limit.wrote(written_at_most(utf8_size(reason)))

    def output(self, handle: str) -> tuple[str, bool]:
        """The session's full raw output and whether it was captured (and is still stored)
        completely."""
        with self._db.read() as conn:
            return chunks.output(conn, self._files, handle)

    def output_tail(self, handle: str, max_chars: int) -> tuple[str, bool]:
        """At least the last ``max_chars`` raw characters, and whether older ones were left out."""
        with self._db.read() as conn:
            return chunks.output_tail(conn, self._files, handle, max_chars)

    def process(self, handle: str) -> dict[str, Any] | None:
        with self._db.read() as conn:
            return sessions.process(conn, handle)

    # -- retention and size ------------------------------------------------------------

    def stored_bytes(self) -> int:
        """The stored bytes plus per-row allowances: what deleting everything would free."""
        with self._db.read() as conn:
            return retention.stored_bytes(conn)

    def apply_retention(self, *, max_age_s: float, max_bytes: int, now: float | None = None) -> int:
        """Delete whole invocations with their output, oldest first, until none is older
        than ``max_age_s`` and the history takes at most ``max_bytes`` on disk; the newest
        and pending ones are always kept. Returns how many were deleted. Works in batches,
        releasing the write lock in between, and ends with the WAL checkpointed and
        truncated and the freed pages given back."""
        when = self._clock() if now is None else now
        deleted = 0
        while True:
            count = self._trim_step(
                lambda conn, dead: retention.age_step(
                    conn, dead, max_age_s=max_age_s, now=when, budget=RETENTION_BATCH
                )
            )
            deleted += count
            if count < RETENTION_BATCH:
                break
        return deleted + self._limit.enforce(max_bytes)

    def _trim_step(self, step: Callable[[sqlite3.Connection, list[int]], int]) -> int:
        """One transaction of deletions; the segments it emptied are removed once it commits."""
        dead: list[int] = []
        with self._db.write("history cannot remove old records: {error}", "none") as conn:
            count = step(conn, dead)
        self._files.remove(dead)
        return count

    def disk_bytes(self) -> int:
        """Bytes the history takes on disk: the database file, its WAL, the output segments.
        Measured under the database's lock: a checkpoint between the two ``stat`` calls
        (another thread trimming) would count pages in neither file."""
        with self._db.lock:
            return self._disk_bytes_locked()

    def _disk_bytes_locked(self) -> int:  # the caller holds the database lock
        return disk_bytes(self._counted) + self._files.disk_bytes

    def compact(self) -> tuple[bool, int, int]:
        """Give free pages back to the file system, in steps, and checkpoint the WAL,
        truncating it. Returns (WAL truncated, bytes still free, bytes on disk as the
        last checkpoint ended): the WAL stays when another process's reader holds it;
        pages stay free in a file without incremental vacuum."""
        while True:
            freed, truncated, free, size = self._db.compact_step(self._disk_bytes_locked)
            if not truncated or not freed or not free:
                return truncated, free, size

    def trim_marker(self) -> tuple[int, int]:
        with self._db.read() as conn:
            return retention.trim_marker(conn)

    def trim_oldest(self, excess: int) -> int:
        """Delete the oldest invocations (never the newest or a pending one) whose rows
        add up to ``excess`` bytes, at most one batch; returns how many."""
        return self._trim_step(
            lambda conn, dead: retention.size_step(conn, dead, excess=excess, budget=RETENTION_BATCH)
        )

    def _switch_to_incremental_vacuum(self) -> None:
        """A file made before incremental vacuum keeps freed pages forever: switch it once,
        after trimming it (VACUUM then has less to copy). If that fails (VACUUM needs as
        much free disk again), freed pages are still reused, and the next start retries."""
        with self._db.lock:
            if self._db.conn is None or is_incremental(self._db.conn):
                return
        self._limit.enforce()
        with self._db.lock:
            # Closed by another thread since the first look: mypy cannot know it changes.
            if self._db.conn is None:
                return  # type: ignore[unreachable]
            before = disk_bytes(self._counted)
            try:
                make_incremental(self._db.conn)
            except sqlite3.Error as exc:
                log.warning("history cannot switch to incremental vacuum: %s", one_line(str(exc)))
                return
        log.info(
            "history switched to incremental vacuum (%d bytes before, %d after)", before, self.disk_bytes()
        )
