"""RestartPolicy: ``ok`` → (crashes within the window reach the limit) → ``gave_up`` until
the window has passed since the last crash. Every call is given an explicit ``now``."""

from __future__ import annotations

import pytest

from zodex_gateway.workers.restart_policy import RestartPolicy


def crashed_at(*times: float, max_crashes: int = 3, window_s: float = 60.0) -> RestartPolicy:
    policy = RestartPolicy(max_crashes=max_crashes, window_s=window_s)
    for t in times:
        policy.record_crash(now=t)
    return policy


def test_fresh_policy_is_ok() -> None:
    policy = RestartPolicy()
    assert (policy.max_crashes, policy.window_s) == (3, 60.0)
    assert not policy.gave_up(now=0.0)
    assert policy.recent_crashes(now=0.0) == 0


def test_gives_up_when_crashes_in_the_window_reach_the_limit() -> None:
    policy = crashed_at(0.0, 10.0)
    assert not policy.gave_up(now=10.0)
    assert policy.recent_crashes(now=10.0) == 2
    policy.record_crash(now=20.0)
    assert policy.gave_up(now=20.0)
    assert policy.recent_crashes(now=20.0) == 3


@pytest.mark.parametrize(("limit", "crashes"), [(1, 1), (2, 2), (5, 5)])
def test_limit_is_configurable(limit: int, crashes: int) -> None:
    times = [float(i) for i in range(crashes)]
    assert not crashed_at(*times[:-1], max_crashes=limit).gave_up(now=times[-1])
    assert crashed_at(*times, max_crashes=limit).gave_up(now=times[-1])


def test_window_slides_so_spread_out_crashes_never_give_up() -> None:
    policy = RestartPolicy(max_crashes=3, window_s=60.0)
    for t in (0.0, 40.0, 80.0, 120.0, 160.0):
        policy.record_crash(now=t)
        assert not policy.gave_up(now=t), t
        assert policy.recent_crashes(now=t) == (1 if t == 0.0 else 2)


def test_a_crash_exactly_one_window_old_still_counts() -> None:
    assert crashed_at(0.0, 30.0, 60.0).gave_up(now=60.0)
    assert crashed_at(0.0, 30.0, 60.0).recent_crashes(now=60.001) == 2


def test_recovers_once_a_full_window_passed_since_the_last_crash() -> None:
    policy = crashed_at(0.0, 1.0, 2.0)
    assert policy.gave_up(now=2.0)
    assert policy.gave_up(now=30.0)
    assert not policy.gave_up(now=62.5)
    assert policy.recent_crashes(now=62.5) == 0
    # After recovering it counts afresh.
    policy.record_crash(now=70.0)
    policy.record_crash(now=71.0)
    assert not policy.gave_up(now=71.0)
    policy.record_crash(now=72.0)
    assert policy.gave_up(now=72.0)


def test_gave_up_holds_for_a_window_after_the_last_crash() -> None:
    """A crash loop must not be restarted at its own pace once the first window slides
    past: giving up lasts until a whole window is quiet (module docstring)."""
    policy = crashed_at(0.0, 50.0, 59.0)
    assert policy.gave_up(now=59.0)
    assert policy.gave_up(now=61.0), "the oldest crash sliding out must not end 'gave up'"
    assert policy.gave_up(now=118.0)
    assert not policy.gave_up(now=119.5)


def test_policies_do_not_share_crashes() -> None:
    a, b = RestartPolicy(max_crashes=1), RestartPolicy(max_crashes=1)
    a.record_crash(now=0.0)
    assert a.gave_up(now=0.0) and not b.gave_up(now=0.0)


def test_default_clock_is_monotonic_time() -> None:
    policy = RestartPolicy(max_crashes=1, window_s=3600.0)
    policy.record_crash()
    assert policy.gave_up()
    assert policy.recent_crashes() == 1
