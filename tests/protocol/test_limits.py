from __future__ import annotations

import pytest

from zodex_protocol.limits import Limits


def test_defaults_match_spec() -> None:
    limits = Limits()
    assert (limits.exec_yield_ms, limits.write_yield_ms) == (10_000, 10_000)
    assert (limits.yield_min_ms, limits.yield_max_ms) == (50, 30_000)
    assert limits.poll_settle_ms == 250
    assert (limits.timeout_ms, limits.timeout_min_ms, limits.timeout_max_ms) == (7_200_000, 1000, 7_200_000)
    assert (limits.kill_grace_ms, limits.drain_ms) == (5000, 200)
    assert (limits.inline_output_chars, limits.preview_chars) == (16_000, 4000)
    assert limits.spill_file_cap_bytes == 16 * 1024 * 1024 and limits.spill_max_age_s == 86_400
    assert (limits.sessions_per_worker, limits.tombstone_s, limits.idle_worker_exit_s) == (64, 3600, 600)


def test_clamps() -> None:
    limits = Limits()
    assert limits.clamp_yield(None, for_exec=True) == 10_000
    assert limits.clamp_yield(0, for_exec=False) == 50
    assert limits.clamp_yield(10**9, for_exec=True) == 30_000
    assert limits.clamp_timeout(None) == 7_200_000
    assert limits.clamp_timeout(1) == 1000
    assert limits.clamp_timeout(10**12) == 7_200_000


def test_round_trip_and_unknown_keys() -> None:
    limits = Limits(sessions_per_worker=3)
    assert Limits.from_dict(limits.to_dict()) == limits
    with pytest.raises(ValueError, match="unknown limit"):
        Limits.from_dict({"nope": 1})
