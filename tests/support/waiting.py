"""Bounded waits for conditions that have no event to wait on (a pid disappearing), in
synchronous tests. The async twin is :func:`tests.support.gateway.wait_for`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tests.support.slowdown import scaled
from zodex_system import proctree

T = TypeVar("T")


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """``timeout`` is scaled by ``ZODEX_TEST_SLOWDOWN`` (tests/support/slowdown.py)."""
    deadline = time.monotonic() + scaled(timeout)
    delay = 0.005
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def wait_for_value(probe: Callable[[], T | None], timeout: float = 10.0, what: str = "value") -> T:
    """Bounded wait for ``probe`` to return something other than None; returns it."""
    found: list[T] = []

    def seen() -> bool:
        value = probe()
        if value is not None:
            found.append(value)
        return value is not None

    wait_until(seen, timeout, what)
    return found[-1]


def process_gone(pid: int, start: int | None) -> bool:
    """True once ``pid`` no longer names the process that started at ``start`` (a zombie
    counts as gone: it no longer runs)."""
    info = proctree.read_proc(pid)
    return info is None or info.zombie or info.start != start
