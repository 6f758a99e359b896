"""One factor for every wait of the suite and its per-test timeouts: ``ZODEX_TEST_SLOWDOWN``
(a number, default 1). On a machine that is loaded or slow, ``ZODEX_TEST_SLOWDOWN=3`` gives
every bounded wait and every timeout three times as long; what a test checks is unchanged."""

from __future__ import annotations

import os


def factor() -> float:
    raw = os.environ.get("ZODEX_TEST_SLOWDOWN", "1")
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"ZODEX_TEST_SLOWDOWN must be a number, not {raw!r}") from None
    if not value >= 1:
        raise SystemExit(f"ZODEX_TEST_SLOWDOWN must be 1 or more, not {raw!r}")
    return value


def scaled(seconds: float) -> float:
    return seconds * factor()
