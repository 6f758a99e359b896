"""What a waiting ``exec`` or ``write`` listens to besides its session (docs/protocol.md#cancel-and-progress).

A gateway may end a call's wait early (``cancel``: its client cancelled the tool call) and
may ask to hear, while the call waits, how long it has run and how much new output waits
(``progress``: its client gave a progress token). A cancelled wait takes no output: what
the command printed stays for the next poll, and the command keeps running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from zodex_protocol.messages import MIN_PROGRESS_MS
from zodex_protocol.progress import ProgressNote

# Told to the gateway: the session waited on, its run time, the characters awaiting a delta.
ProgressSink = Callable[[ProgressNote], None]


class WaitCancelled(Exception):
    """The gateway cancelled the call while it waited: no reply is sent."""


@dataclass
class CallWait:
    """One request's wait controls. ``progress_ms``: how often to report, None for never."""

    progress_ms: int | None = None
    report: ProgressSink | None = None
    cancelled: bool = False
    _wake: Callable[[], None] | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self._wake is not None:
            self._wake()

    def waiting_on(self, wake: Callable[[], None] | None) -> None:
        """The session's wait now in progress: ``wake`` ends its current sleep."""
        self._wake = wake

    def reporting(self, note: Callable[[], ProgressNote]) -> ProgressTicker | None:
        if self.progress_ms is None or self.report is None:
            return None
        return ProgressTicker(max(self.progress_ms, MIN_PROGRESS_MS) / 1000, note, self.report)

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            raise WaitCancelled


class ProgressTicker:
    """Reports every ``interval`` seconds until closed. A timer by nature: a progress note is
    also what keeps a client's request timer from running out while nothing else happens."""

    def __init__(self, interval: float, note: Callable[[], ProgressNote], report: ProgressSink) -> None:
        self._interval = interval
        self._note = note
        self._report = report
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        self._report(self._note())
        self._handle = self._loop.call_later(self._interval, self._tick)

    def close(self) -> None:
        self._handle.cancel()
