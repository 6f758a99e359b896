"""A host's log of refused gateway keys (docs/fleet.md#hosts) on a fake clock: a key's first
refusal at once, its later ones summed into a line a minute, quiet keys forgotten, a bounded
number of keys remembered, and every refusal accounted for in the log."""

from __future__ import annotations

import logging
import re

import pytest

from zodex_gateway.fleet.refusal_log import LOG_EVERY_S, MAX_KEYS, RefusalLog

FIRST = re.compile(r"refused a gateway whose key is not allowed: (\S+)$")
COUNT = re.compile(
    r"refused a gateway whose key is not allowed: (\S+) \((\d+) more attempts since the last line about it\)$"
)
OTHERS = re.compile(
    r"refused a gateway whose key is not allowed: (\d+) more attempts with other keys, not named \(over (\d+) keys at once\)$"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = [r.getMessage() for r in caplog.records if r.name == "zodex.host"]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "zodex.host")
    return found


def accounted(messages: list[str]) -> int:
    """How many refusals the lines account for: one per first line, n per summed line."""
    total = 0
    for message in messages:
        if (count := COUNT.fullmatch(message)) is not None:
            total += int(count[2])
        elif (others := OTHERS.fullmatch(message)) is not None:
            total += int(others[1])
        else:
            assert FIRST.fullmatch(message), message
            total += 1
    return total


def test_the_first_refusal_is_logged_at_once_and_the_rest_summed_each_minute(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "zodex.host")
    refusals = RefusalLog(clock=clock)
    refusals.refused("KEY1")
    assert lines(caplog) == ["refused a gateway whose key is not allowed: KEY1"]
    for _ in range(59):  # a peer retrying every second
        clock.now += 1
        refusals.refused("KEY1")
    assert len(lines(caplog)) == 1, "nothing more within the minute"
    clock.now += 1
    refusals.refused("KEY1")  # a minute after the first line: the count so far
    assert lines(caplog)[1:] == [
        "refused a gateway whose key is not allowed: KEY1 (59 more attempts since the last line about it)"
    ]
    clock.now += 5
    refusals.refused("KEY1")
    refusals.flush()  # the host stops: what is counted is logged
    assert lines(caplog)[2:] == [
        "refused a gateway whose key is not allowed: KEY1 (2 more attempts since the last line about it)"
    ]
    refusals.flush()
    assert len(lines(caplog)) == 3, "a count is logged once"
    assert accounted(lines(caplog)) == 62


def test_a_key_quiet_for_a_minute_is_forgotten_and_logged_at_once_again(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "zodex.host")
    refusals = RefusalLog(clock=clock)
    refusals.refused("KEY1")
    clock.now += LOG_EVERY_S
    refusals.refused("KEY2")  # KEY1 is forgotten here, having nothing to report
    refusals.refused("KEY1")
    assert lines(caplog) == [
        "refused a gateway whose key is not allowed: KEY1",
        "refused a gateway whose key is not allowed: KEY2",
        "refused a gateway whose key is not allowed: KEY1",
    ]


def test_keys_beyond_the_bound_are_counted_together_without_their_keys(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "zodex.host")
    refusals = RefusalLog(clock=clock, max_keys=3)
    for _ in range(10):
        for n in range(10):
            refusals.refused(f"KEY{n}")
    assert lines(caplog) == [f"refused a gateway whose key is not allowed: KEY{n}" for n in range(3)]
    clock.now += LOG_EVERY_S
    refusals.refused("KEY9")  # a minute on: the remembered keys' counts and the others'
    assert lines(caplog)[3:] == [
        *(
            f"refused a gateway whose key is not allowed: KEY{n} (9 more attempts since the last line about it)"
            for n in range(3)
        ),
        "refused a gateway whose key is not allowed: 70 more attempts with other keys, not named (over 3 keys at once)",
    ]
    refusals.flush()
    assert accounted(lines(caplog)) == 101


def test_a_flood_of_keys_gets_a_bounded_number_of_lines_a_minute_and_every_refusal_is_counted(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten minutes of 50 refusals a second, each with a new key or one of a few retrying."""
    caplog.set_level(logging.WARNING, "zodex.host")
    refusals = RefusalLog(clock=clock)
    made = 0
    per_minute: list[int] = []
    for minute in range(10):
        before = len(lines(caplog))
        for tick in range(60 * 50):
            clock.now += 0.02
            refusals.refused(f"NEW{minute}-{tick}" if tick % 2 else f"RETRY{tick % 10}")
            made += 1
        per_minute.append(len(lines(caplog)) - before)
    assert max(per_minute) <= MAX_KEYS + 1, per_minute
    refusals.flush()
    assert accounted(lines(caplog)) == made
