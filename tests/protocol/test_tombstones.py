"""The tombstone codec: the exit file both the worker and the gateway read, and the rule of
a poll's answer (docs/sessions.md#after-exit, docs/protocol.md#session-handles)."""

from __future__ import annotations

import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import msgpack
import pytest

from zodex_protocol import tombstones
from zodex_protocol.replies import SessionResult, SpilledOutput
from zodex_protocol.tombstones import Tombstone

FINAL = SessionResult(
    summary="exited 2 after 0.4s",
    status="exited",
    output="",
    cwd="/w",
    wall_time_ms=400,
    exit_code=2,
    termination_reason="exit",
)
SPILLED = SessionResult(
    summary="terminated by SIGTERM after 1.0s",
    status="exited",
    output="",
    cwd="/w",
    wall_time_ms=1000,
    exit_code=-15,
    signal="SIGTERM",
    termination_reason="killed",
    background_processes=0,
    spilled=SpilledOutput(
        output_chars=90_000, output_lines=12, output_file="/s/f.log", output_file_truncated=False
    ),
)


def test_a_poll_repeats_the_final_fields_without_output() -> None:
    final = replace(FINAL, output="old output", session="h")
    answer = tombstones.poll_result(final)
    assert answer.fields() == {**final.fields(), "output": ""}
    assert answer.session is None, "a poll answers no wire-only session"
    assert final.output == "old output", "the stored final result is not changed"


def test_the_file_round_trips(tmp_path: Path) -> None:
    stones = {"aaaaaaa1-0000000001": Tombstone(FINAL, 1e10), "aaaaaaa1-0000000002": Tombstone(SPILLED, 2e10)}
    assert tombstones.decode(tombstones.encode(stones)) == stones


def test_the_format_is_the_documented_msgpack_map() -> None:
    """A handle maps to {final, expires_at}: files of earlier workers stay readable."""
    raw = msgpack.unpackb(tombstones.encode({"h": Tombstone(SPILLED, 123.5)}), raw=False)
    assert raw == {"h": {"final": SPILLED.to_body(), "expires_at": 123.5}}
    older = msgpack.packb({"h": {"final": FINAL.fields(), "expires_at": 7}}, use_bin_type=True)
    assert tombstones.decode(older) == {"h": Tombstone(FINAL, 7.0)}


def test_a_poll_is_answered_from_the_file_until_it_expires(tmp_path: Path) -> None:
    path = tmp_path / "w" / "abc-1.exit"
    path.parent.mkdir()
    now = time.time()
    path.write_bytes(
        tombstones.encode({"live": Tombstone(FINAL, now + 60), "old": Tombstone(FINAL, now - 1)})
    )
    answer = tombstones.answer_from_file(path, "live")
    assert answer is not None and answer.fields() == {**FINAL.fields(), "output": ""}
    assert tombstones.answer_from_file(path, "old") is None, "expired"
    assert tombstones.answer_from_file(path, "live", now=now + 61) is None
    assert tombstones.answer_from_file(path, "other") is None, "not in the file: unknown"
    assert tombstones.answer_from_file(tmp_path / "missing.exit", "live") is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # never used in msgpack
        msgpack.packb([1, 2]),
        msgpack.packb({"h": "final"}),
        msgpack.packb({1: {"final": {}, "expires_at": 1.0}}),
        msgpack.packb({"h": {"final": FINAL.fields()}}),
        msgpack.packb({"h": {"final": FINAL.fields(), "expires_at": True}}),
        msgpack.packb({"h": {"final": FINAL.fields(), "expires_at": "soon"}}),
        msgpack.packb({"h": {"final": {"summary": "x"}, "expires_at": 1e10}}),
        msgpack.packb({"h": {"final": {**FINAL.fields(), "status": "weird"}, "expires_at": 1e10}}),
    ],
)
def test_a_damaged_file_is_refused_and_its_handles_are_unknown(data: bytes, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        tombstones.decode(data)
    path = tmp_path / "x.exit"
    path.write_bytes(data)
    assert tombstones.answer_from_file(path, "h") is None


def map32(count: int) -> bytes:
    """The msgpack header of a map of ``count`` entries."""
    return b"\xdf" + count.to_bytes(4, "big")


def array32(count: int) -> bytes:
    return b"\xdd" + count.to_bytes(4, "big")


EIGHT_M = 8 * 1024 * 1024


@pytest.mark.parametrize(
    "forged",
    [
        pytest.param(b"\x81\xa1h" + array32(EIGHT_M) + b"\x80" * EIGHT_M, id="8M empty maps in the entry"),
        pytest.param(map32(EIGHT_M) + b"\xa1h\x80" * EIGHT_M, id="8M handles"),
        pytest.param(b"\x81\xa1h" + b"\x81\xa1a" * EIGHT_M + b"\x80", id="8M nested maps"),
    ],
)
def test_a_forged_exit_file_costs_a_bounded_amount(tmp_path: Path, forged: bytes) -> None:
    """Millions of empty maps in a few megabytes: the answer is unknown, and decoding it
    holds a small multiple of the file, never the hundreds of megabytes of millions of dicts."""
    path = tmp_path / "w-1.exit"
    path.write_bytes(forged)
    tracemalloc.start()
    try:
        assert tombstones.answer_from_file(path, "h") is None
        assert tombstones.answer_from_file(path, "other") is None
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(forged), peak


def test_the_wanted_entry_is_found_past_a_large_one(tmp_path: Path) -> None:
    """Other entries are skipped, not built: a large one before the wanted does not matter."""
    now = time.time()
    wanted = msgpack.packb({"final": FINAL.to_body(), "expires_at": now + 60}, use_bin_type=True)
    data = map32(2) + b"\xa5other" + array32(1_000_000) + b"\x80" * 1_000_000 + b"\xa4mine" + wanted
    path = tmp_path / "w-1.exit"
    path.write_bytes(data)
    assert tombstones.answer_from_file(path, "mine") == tombstones.poll_result(FINAL)
    assert tombstones.answer_from_file(path, "other") is None, "an entry that is not a tombstone"


@pytest.mark.parametrize("key", [b"\xdb" + (1 << 20).to_bytes(4, "big") + b"k" * (1 << 20), b"\x80"])
def test_a_handle_that_is_not_a_short_string_is_refused(tmp_path: Path, key: bytes) -> None:
    path = tmp_path / "w-1.exit"
    path.write_bytes(b"\x81" + key + b"\x80")
    assert tombstones.answer_from_file(path, "h") is None
    with pytest.raises(ValueError, match="not a tombstone file"):
        tombstones.decode(path.read_bytes())


def test_an_exit_file_keeps_the_tombstones_that_expire_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tombstones, "MAX_TOMBSTONES", 3)
    stones = {f"h{n}": Tombstone(FINAL, 1000.0 + n) for n in range(5)}
    assert set(tombstones.decode(tombstones.encode(stones))) == {"h2", "h3", "h4"}
    with pytest.raises(ValueError, match="more than 3 handles"):
        tombstones.decode(msgpack.packb({f"h{n}": {} for n in range(4)}))
