from __future__ import annotations

import re
import secrets

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zodex_protocol.handles import (
    MAX_HANDLE_CHARS,
    MAX_INCARNATION,
    SessionHandle,
    check_host_incarnation,
    new_host_incarnation,
    worker_id_for,
)

HANDLE_RE = re.compile(r"^[A-Za-z0-9]+-[A-Za-z0-9]+$")


def test_worker_id_is_a_pure_function_of_the_path() -> None:
    assert worker_id_for("/repo/a") == worker_id_for("/repo/a")
    assert worker_id_for("/repo/a") != worker_id_for("/repo/b")
    assert re.fullmatch(r"[a-z2-7]{7}", worker_id_for("/"))


@given(st.text(min_size=1), st.integers(min_value=0, max_value=10_000))
def test_handles_round_trip(path: str, incarnation: int) -> None:
    handle = SessionHandle.new(worker_id_for(path), incarnation)
    text = str(handle)
    assert len(text) <= 20 and HANDLE_RE.match(text) and text.isascii()
    parsed = SessionHandle.parse(text)
    assert parsed == handle
    assert parsed is not None and parsed.incarnation == incarnation % MAX_INCARNATION


def test_random_part_is_unguessable() -> None:
    tokens = {SessionHandle.new("abcdefg", 1).token for _ in range(2000)}
    assert len(tokens) == 2000
    # 10 base-36 characters: log2(36**10) > 51 bits, above the 48 of docs/sessions.md#handles.
    assert 36**10 > 2**48


def test_the_random_part_spans_every_token_at_full_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """One draw from the CSPRNG makes all ten characters: its lowest and highest values are
    the first and last tokens, still ten characters, and one draw is taken per handle."""
    draws: list[int] = []

    def draw(bound: int) -> int:
        draws.append(bound)
        return bound - 1 if len(draws) % 2 else 0

    monkeypatch.setattr(secrets, "randbelow", draw)
    assert SessionHandle.new("abcdefg", 1).token == "z" * 10
    assert SessionHandle.new("abcdefg", 1).token == "0" * 10
    assert draws == [36**10, 36**10]


def test_parse_rejects_non_handles() -> None:
    for text in (
        "",
        "abc",
        "ABCDEFG1-0123456789",
        "abcdefg1-012345678",
        "abcdefg1_0123456789",
        "abcdefg123-0123456789",
    ):
        assert SessionHandle.parse(text) is None


def test_host_handles_carry_the_host_incarnation_within_32_characters() -> None:
    # docs/fleet.md#handles-across-hosts: the host's incarnation ends the handle.
    handle = SessionHandle.new(worker_id_for("/w"), 1295, host="k3j9x2")
    text = str(handle)
    assert len(text) <= MAX_HANDLE_CHARS and text.endswith("k3j9x2") and text.count("-") == 1
    assert SessionHandle.parse(text) == handle
    local = SessionHandle.new(worker_id_for("/w"), 3)
    parsed = SessionHandle.parse(str(local))
    assert parsed is not None and parsed.host == "" and len(str(local)) <= 20
    assert SessionHandle.parse(str(local) + "abc") is None  # a host part is exactly 6
    assert SessionHandle.parse(str(handle) + "x") is None


def test_host_incarnations_are_checked_and_fresh() -> None:
    assert check_host_incarnation("0az9k1") == "0az9k1"
    for bad in ("", "ABCDEF", "abc", "abcdefg", "abc-de"):
        with pytest.raises(ValueError):
            check_host_incarnation(bad)
    taken = {new_host_incarnation(set()) for _ in range(50)}
    assert new_host_incarnation(taken) not in taken
