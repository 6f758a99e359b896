"""How often a workdir's worker may crash before the gateway stops restarting it.

A small state machine kept apart from the spawn code: ``ok`` → (crashes within the window
reach the limit) → ``gave_up``, which holds until a whole window has passed since the last
crash, so a tight crash loop is not restarted each time its oldest crash slides out.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field


@dataclass
class RestartPolicy:
    max_crashes: int = 3
    window_s: float = 60.0
    _crashes: deque[float] = field(default_factory=deque)
    _gave_up: bool = False

    def record_crash(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._crashes.append(now)
        self._trim(now)
        self._gave_up = self._gave_up or len(self._crashes) >= self.max_crashes

    def _trim(self, now: float) -> None:
        while self._crashes and self._crashes[0] < now - self.window_s:
            self._crashes.popleft()

    def gave_up(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        self._trim(now)
        self._gave_up = len(self._crashes) >= self.max_crashes or (self._gave_up and bool(self._crashes))
        return self._gave_up

    def recent_crashes(self, now: float | None = None) -> int:
        self._trim(time.monotonic() if now is None else now)
        return len(self._crashes)
