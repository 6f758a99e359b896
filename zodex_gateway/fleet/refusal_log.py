"""How a host logs the gateways ZAP refuses (docs/fleet.md#hosts), so that a peer retrying in
a loop, or cycling through keys, cannot fill the log.

A key's first refusal is logged at once. Its later refusals are counted and logged as one
line at most every :data:`LOG_EVERY_S`, when a refusal comes after that long, and at the
host's stop; a key with no refusal for that long is forgotten (its next one is a first
again). At most :data:`MAX_KEYS` keys are remembered: while that many are, refusals of
other keys are counted together, without their keys. So the log gets at most
``MAX_KEYS + 1`` lines a minute, whatever the peers do. Counted on a clock read per
refusal, no timer (the same as the size limit's trims and Sprite's worker stderr).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

log = logging.getLogger("zodex.host")

LOG_EVERY_S: Final = 60.0
MAX_KEYS: Final = 32
REFUSED: Final = "refused a gateway whose key is not allowed"


@dataclass
class _Key:
    logged_at: float
    unlogged: int = 0


class RefusalLog:
    """Not thread-safe: ZAP's callback runs on the host's event loop."""

    def __init__(
        self,
        *,
        every_s: float = LOG_EVERY_S,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._every_s = every_s
        self._max_keys = max_keys
        self._clock = clock
        self._keys: OrderedDict[str, _Key] = OrderedDict()  # the oldest line first
        self._others = 0  # refusals of keys not remembered (too many keys)
        self._others_since = 0.0

    def refused(self, key: str) -> None:
        now = self._clock()
        self._due(now)
        seen = self._keys.get(key)
        if seen is not None:
            seen.unlogged += 1
        elif len(self._keys) < self._max_keys:
            log.warning("%s: %s", REFUSED, key)
            self._keys[key] = _Key(now)
        else:
            if not self._others:
                self._others_since = now
            self._others += 1

    def flush(self) -> None:
        """Log every count not logged yet (the host is stopping)."""
        for key, seen in self._keys.items():
            if seen.unlogged:
                self._log_count(key, seen.unlogged)
        self._keys.clear()
        if self._others:
            self._log_others()

    def _due(self, now: float) -> None:
        """Counts whose key's last line is ``every_s`` old are logged; quiet keys are forgotten."""
        while self._keys:
            key, seen = next(iter(self._keys.items()))
            if now - seen.logged_at < self._every_s:
                break
            del self._keys[key]
            if seen.unlogged:
                self._log_count(key, seen.unlogged)
                self._keys[key] = _Key(now)  # still refused: summed again from here
        if self._others and now - self._others_since >= self._every_s:
            self._log_others()

    def _log_count(self, key: str, count: int) -> None:
        log.warning("%s: %s (%d more attempts since the last line about it)", REFUSED, key, count)

    def _log_others(self) -> None:
        log.warning(
            "%s: %d more attempts with other keys, not named (over %d keys at once)",
            REFUSED, self._others, self._max_keys,
        )  # fmt: skip
        self._others = 0
