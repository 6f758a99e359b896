"""Keeping history within ``history.max-size`` bytes on disk as it is written
(docs/history.md#retention).

Size is what the files take: the database plus its WAL. After every write the store tells
:meth:`SizeLimit.wrote` how much it can at most have added; the files are measured (two
``stat`` calls) only once those amounts could have used up the room the last measure left
under the limit. Over the limit, a trim runs — at once on the
output capture's thread (so a flood of output overshoots by at most one batch), and on
this module's own thread for writes made on the event loop. A trim checkpoints and
truncates the WAL, gives freed pages back (incremental vacuum), and deletes the oldest
invocations, a few at a time, until the file is back under the limit with some room
(:data:`HEADROOM_BYTES`), so that the next writes do not trim again at once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Final, Protocol

from zodex_gateway.history.records import HistoryUnavailable

log = logging.getLogger("zodex.gateway")

# A trim goes this far under the limit (or an eighth of it, if less), so that a flood of
# output near the limit trims once per few megabytes, not after every batch.
HEADROOM_BYTES: Final = 4 * 1024 * 1024
LOG_EVERY_S: Final = 60.0  # trims under a steady flood are summed into one line a minute
# What one small write (a call's begin or completion, a process row) adds to the files at
# most, beyond twice its values: a begin dirties six pages (25 KB of WAL frames), the
# checkpoint that copies them may grow the database file by as much again, and now and
# then a b-tree split or a pointer-map page adds a few more.
SMALL_WRITE_BYTES: Final = 128 * 1024


def written_at_most(value_bytes: int) -> int:
    """What a small write holding ``value_bytes`` of values adds to the files at most:
    they pass through the WAL once and are then copied into the database."""
    return SMALL_WRITE_BYTES + 2 * value_bytes


class Trimmable(Protocol):
    def disk_bytes(self) -> int: ...

    def compact(self) -> tuple[bool, int, int]: ...

    def trim_marker(self) -> tuple[int, int]: ...

    def trim_oldest(self, excess: int) -> int: ...


@dataclass(frozen=True)
class Trimmed:
    deleted: int
    size: int  # bytes on disk after, less pages still free (given back later)
    stuck: tuple[int, int] | None  # only the newest and pending calls were left
    wal_kept: bool  # a reader in another process kept the WAL from being truncated


def trim_to_size(store: Trimmable, max_bytes: int, *, stuck: tuple[int, int] | None = None) -> Trimmed:
    """Compact, then delete the oldest invocations until the history takes at most
    ``max_bytes`` less the headroom. ``stuck``: the marker of an earlier trim that found
    nothing to delete; while it holds, nothing is looked for again."""
    target = max(0, max_bytes - min(HEADROOM_BYTES, max_bytes // 8))
    deleted = 0
    while True:
        truncated, free, size = store.compact()
        # Pages still free (incremental vacuum unavailable) are reused by new rows, so they
        # do not count: deleting more could not shrink the file anyway. The size is taken
        # as the checkpoint ends: a call recorded meanwhile would sit in the WAL, counted
        # there once for its begin and again for its completion, and more would be deleted
        # than the limit asks for.
        size -= free
        if not truncated:
            return Trimmed(deleted, size, None, wal_kept=True)
        if size <= target:
            return Trimmed(deleted, size, None, wal_kept=False)
        marker = store.trim_marker()
        if marker == stuck:
            return Trimmed(deleted, size, marker, wal_kept=False)
        count = store.trim_oldest(size - target)
        if count == 0:
            return Trimmed(deleted, size, marker, wal_kept=False)
        deleted += count


class SizeLimit:
    def __init__(self, store: Trimmable, max_bytes: int | None) -> None:
        self._store = store
        self._max = max_bytes
        self._lock = threading.Lock()  # one trim at a time
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._stuck: tuple[int, int] | None = None
        self._warned_over = False
        self._unlogged = 0
        self._logged_at = float("-inf")
        self._failing = False
        # Bytes written at most since the store opened, and (that count, the room under
        # the limit) at the last measure. The count is read before the files are measured,
        # so a write landing during a measure on another thread is counted twice, never
        # missed; the pair is one tuple, so a reader never sees half of a new measure; and
        # an older measure recorded after a newer one is only more cautious.
        # The count is kept without a lock (a call's begin and completion both come here):
        # two threads adding at once may lose one addition, which only measures the files
        # a write later.
        self._written = 0
        self._measured = (0, 0)

    def over(self) -> bool:
        if self._max is None:
            return False
        written = self._written
        room = self._max - self._store.disk_bytes()
        self._measured = (written, room)
        return room < 0

    def wrote(self, at_most: int) -> None:
        """After a write on any thread that added at most ``at_most`` bytes to the files
        (:func:`written_at_most`): when that may have crossed the limit, measure; over
        it, wake the trimming thread."""
        if self._max is None or self._closing:
            return
        self._written += at_most
        written, room = self._measured
        if room - (self._written - written) >= 0 or not self.over():
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="zodex-history-trim", daemon=True)
            self._thread.start()
        self._wake.set()

    def enforce(self, max_bytes: int | None = None) -> int:
        """Trim now if over ``max_bytes`` (default: the limit); returns how many invocations
        were deleted. Failures are logged, not raised: the write that led here succeeded."""
        limit = self._max if max_bytes is None else max_bytes
        if limit is None:
            return 0
        with self._lock:
            if max_bytes is None and not self.over():
                return 0
            try:
                trimmed = trim_to_size(self._store, limit, stuck=self._stuck)
            except HistoryUnavailable as exc:
                if not self._failing:
                    log.warning("history cannot trim itself to its size limit: %s", exc.cause)
                    self._failing = True
                return 0
            self._failing = False
            self._report(trimmed, limit)
            return trimmed.deleted

    def _report(self, trimmed: Trimmed, limit: int) -> None:
        # Once while it lasts: each new call would otherwise find the same excess again.
        if trimmed.size <= limit:
            self._warned_over = False
        elif trimmed.stuck is not None and not self._warned_over:
            log.warning(
                "history takes %d bytes, over its limit of %d, but holds only its newest and pending calls",
                trimmed.size, limit,
            )  # fmt: skip
            self._warned_over = True
        if trimmed.wal_kept:
            log.info("history WAL not truncated: another process is reading the history")
        self._stuck = trimmed.stuck
        self._unlogged += trimmed.deleted
        now = time.monotonic()
        if self._unlogged and now - self._logged_at >= LOG_EVERY_S:
            log.info(
                "history trimmed to its size limit (%d bytes): removed %d oldest invocations",
                limit, self._unlogged,
            )  # fmt: skip
            self._unlogged = 0
            self._logged_at = now

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            self.enforce()

    def close(self) -> None:
        """Stop the trimming thread (it finishes the step it is in)."""
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
