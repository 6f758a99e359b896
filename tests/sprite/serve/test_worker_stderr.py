"""A worker's stderr in the service's log: the agent controls what it says (it may ptrace
its worker), so lines are escaped and their number bounded, and the pipe is drained."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from zodex_gateway.sprite.launcher import LineBudget, _log_stderr, printable


def test_the_budget_allows_a_burst_then_a_steady_rate() -> None:
    now = [0.0]
    budget = LineBudget(burst=3, per_s=2.0, clock=lambda: now[0])
    assert [budget.take() for _ in range(5)] == [True, True, True, False, False]
    assert budget.dropped == 2
    now[0] += 0.5  # one line's worth of time
    assert [budget.take(), budget.take()] == [True, False]
    now[0] += 100  # never more than the burst at once
    assert sum(budget.take() for _ in range(10)) == 3


def test_control_characters_are_escaped() -> None:
    assert printable("ok\rFAKE \x1b[31mred\x00") == "ok\\rFAKE \\x1b[31mred\\x00"
    assert printable("tab\there é") == "tab\\there é"


async def test_a_flood_is_drained_and_only_a_bounded_part_logged(caplog: pytest.LogCaptureFixture) -> None:
    read_fd, write_fd = os.pipe()
    lines = 5000

    def flood() -> None:  # more than a pipe holds: the reader must keep draining
        with os.fdopen(write_fd, "wb") as out:
            out.write(b"first\r\x1b[2Kforged line\n")
            out.write(b"AAAA\n" * lines)

    writer = threading.Thread(target=flood)
    writer.start()
    with caplog.at_level(logging.WARNING, logger="zodex.sprite"):
        await _log_stderr(4242, read_fd, LineBudget(burst=50, per_s=0.0))
    writer.join(timeout=10)
    assert not writer.is_alive()
    messages = [r.getMessage() for r in caplog.records if r.name == "zodex.sprite"]
    assert messages[0] == "worker 4242: first\\r\\x1b[2Kforged line"
    assert len(messages) == 51
    assert messages[-1] == f"worker 4242: {lines + 1 - 50} lines of its stderr were not logged (too many)"
