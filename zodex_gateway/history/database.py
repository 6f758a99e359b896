"""The history's one SQLite connection, shared by threads under a lock.

Every use is one short transaction. Writes start with ``BEGIN IMMEDIATE`` so that two
processes sharing the file queue on the busy timeout instead of failing to upgrade a read
lock. Any SQLite error leaves as :class:`HistoryUnavailable`, one line fit to show the model.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Literal, TypeVar

from zodex_gateway.history.records import HistoryUnavailable
from zodex_gateway.history.reserve import SpaceReserve, is_disk_full
from zodex_gateway.history.storage import checkpoint, connect, vacuum_step

log = logging.getLogger("zodex.gateway")

# After a write: wake the trimming thread if over the size limit, trim at once (the
# output capture's thread), or nothing (the trim's own deletions).
SizeCheck = Literal["wake", "enforce", "none"]
T = TypeVar("T")


def one_line(text: str) -> str:
    return " ".join(text.split())


class Database:
    def __init__(
        self,
        directory: Path,
        *,
        busy_timeout_s: float,
        reserve: SpaceReserve,
        after_write: Callable[[SizeCheck], None],
    ) -> None:
        """Open (creating) the file in ``directory``; raises HistoryUnavailable.
        ``after_write`` is told of every committed write, with its size check."""
        self.lock = threading.Lock()
        self._reserve = reserve
        self._after_write = after_write
        self._busy_timeout_ms = round(busy_timeout_s * 1000)
        try:
            self.conn: sqlite3.Connection | None = connect(directory, busy_timeout_s=busy_timeout_s)
        except (OSError, sqlite3.Error) as exc:
            raise HistoryUnavailable(one_line(f"history cannot open {directory}: {exc}")) from exc

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None

    @contextmanager
    def write(self, failure: str, size_check: SizeCheck = "wake") -> Iterator[sqlite3.Connection]:
        """One write transaction; any SQLite error becomes HistoryUnavailable(``failure``
        with ``{error}`` filled in). Once committed, the size limit is checked."""
        with self.lock, self._transaction("BEGIN IMMEDIATE", failure) as conn:
            yield conn
        self._after_write(size_check)

    @contextmanager
    def read(self, failure: str = "history cannot be read: {error}") -> Iterator[sqlite3.Connection]:
        # A read transaction: several SELECTs see one snapshot.
        with self.lock, self._transaction("BEGIN", failure) as conn:
            yield conn

    def _transaction(self, begin: str, failure: str) -> _Transaction:
        return _Transaction(self._open(failure), begin, failure)

    def run(self, failure: str, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` in one write transaction, as :meth:`write` runs its block but without
        the size check (the caller makes it, knowing what it wrote) and without the
        generator frame of a context manager: every call's begin and completion come
        here, on the event loop."""
        with self.lock, self._transaction("BEGIN IMMEDIATE", failure) as conn:
            return work(conn)

    def _open(self, failure: str) -> sqlite3.Connection:
        if self.conn is None:
            raise HistoryUnavailable(failure.replace("{error}", "history is closed"), "history is closed")
        return self.conn

    def essential(self, failure: str, write: Callable[[sqlite3.Connection], T]) -> T:
        """A write that must not be lost to a full disk (:meth:`run`, so the caller checks
        the size): if the disk is full, give up the reserved space and try once more
        (docs/history.md#recording)."""
        try:
            return self.run(failure, write)
        except HistoryUnavailable as exc:
            if not is_disk_full(exc.__cause__) or not self._reserve.release():
                raise
            log.warning("history: the disk is full; using the space kept for completing calls")
            return self.run(failure, write)

    def compact_step(self, measure: Callable[[], int]) -> tuple[int, bool, int, int]:
        """Give up to one step of free pages back and checkpoint the WAL, truncating it:
        (pages freed, WAL truncated, bytes still free, ``measure()`` right after, before
        any other write could add to the files)."""
        with self.lock:
            conn = self.conn
            if conn is None:
                raise HistoryUnavailable("history is closed", "history is closed")
            try:
                freed, free = vacuum_step(conn)
                truncated = checkpoint(conn, busy_timeout_ms=self._busy_timeout_ms)
            except sqlite3.Error as exc:
                cause = one_line(str(exc))
                raise HistoryUnavailable(f"history cannot compact itself: {cause}", cause) from exc
            return freed, truncated, free, measure()


class _Transaction:
    """One transaction on ``conn``: committed when its block ends, rolled back when it
    raises; any SQLite error leaves as HistoryUnavailable(``failure``). A class, not a
    generator: entering and leaving it is cheap enough for every recorded call."""

    __slots__ = ("begin", "conn", "failure")

    def __init__(self, conn: sqlite3.Connection, begin: str, failure: str) -> None:
        self.conn, self.begin, self.failure = conn, begin, failure

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute(self.begin)
        except sqlite3.Error as exc:
            raise _unavailable(self.failure, exc) from exc
        return self.conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            try:
                self.conn.execute("COMMIT")
                return
            except sqlite3.Error as failed:
                exc = failed
        _roll_back(self.conn)
        if isinstance(exc, sqlite3.Error):
            raise _unavailable(self.failure, exc) from exc


def _roll_back(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the original error is the one worth reporting


def _unavailable(failure: str, exc: sqlite3.Error) -> HistoryUnavailable:
    cause = one_line(str(exc))
    return HistoryUnavailable(one_line(failure.replace("{error}", cause)), cause)
