"""The wait_for pattern (docs/tools.md#waiting-for-output): refusals with positions, RE2's
multi-line syntax, linear time on a pattern that backtracking engines take exponential time on."""

from __future__ import annotations

import time

import pytest

from tests.support.slowdown import scaled
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.limits import Limits
from zodex_protocol.replies import SessionResult
from zodex_protocol.requests import ExecRequest, WriteRequest
from zodex_protocol.wait_pattern import WaitPattern, matched_text


def refusal(source: object) -> str:
    with pytest.raises(ProtocolError) as caught:
        ExecRequest.from_args({"cmd": "true", "workdir": "/", "wait_for": source}, Limits())
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    return caught.value.message


def found(source: str, text: str, start: int = 0) -> str | None:
    data = text.encode()
    span = WaitPattern.compile(source).search(data, start)
    return None if span is None else data[span[0] : span[1]].decode()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("(", "wait_for is not a valid regular expression at position 0: missing ), unterminated subpattern"),
        (
            "ab(c",
            "wait_for is not a valid regular expression at position 2: missing ), unterminated subpattern",
        ),
        ("x**", "wait_for is not a valid regular expression at position 2: multiple repeat"),
        ("[z-a]", "wait_for is not a valid regular expression at position 1: bad character range z-a"),
        ("", "wait_for must not be empty"),
        ("a" * 1001, "wait_for is too long (1001 characters; the limit is 1000)"),
        (5, "wait_for must be a string"),
    ],
)
def test_refusals_name_the_field_and_the_position(source: object, message: str) -> None:
    assert refusal(source) == message


@pytest.mark.parametrize(
    ("source", "position", "fragment"),
    [
        ("x(?=y)", 1, "invalid perl operator (?="),
        (r"(a)\1", 3, r"invalid escape sequence \1"),
        ("a++", 1, "bad repetition operator ++"),
        ("ab{2000}", 2, "invalid repetition size {2000}"),
    ],
)
def test_what_only_re2_refuses_is_located_by_its_fragment(source: str, position: int, fragment: str) -> None:
    assert refusal(source).startswith(
        f"wait_for is not supported at position {position}: {fragment} (wait_for is RE2 syntax"
    )


def test_write_stdin_checks_it_too() -> None:
    with pytest.raises(ProtocolError, match="wait_for is not a valid regular expression at position 0"):
        WriteRequest.from_args({"session_handle": "ab-cd", "wait_for": "("}, Limits())


def test_the_longest_pattern_is_accepted_and_travels() -> None:
    request = ExecRequest.from_args({"cmd": "true", "workdir": "/", "wait_for": "a" * 1000}, Limits())
    body = request.to_body()
    assert body["wait_for"] == "a" * 1000
    assert ExecRequest.from_body(body, Limits()) == request
    write = WriteRequest.from_args({"session_handle": "ab-cd", "wait_for": "x"}, Limits())
    assert WriteRequest.from_body(write.to_body(), Limits()) == write
    assert "wait_for" not in ExecRequest.from_args({"cmd": "true", "workdir": "/"}, Limits()).to_body()


def test_lines_anchor_and_the_end_of_the_output_is_a_line_end() -> None:
    assert found(r"^ready$", "starting\nready\nmore") == "ready"
    assert found(r"\$ $", "make\n$ ") == "$ "
    assert found(r"^b", "ab", start=1) is None  # the context before start is seen
    assert found(r"^b", "a\nb", start=2) == "b"
    assert found(r"\bb", "ab", start=1) is None
    assert found(r"(?i)password:", "Password:") == "Password:"
    assert found("a.b", "a\nb") is None
    assert found("é+", "xééy") == "éé"


@pytest.mark.parametrize("source", ["(a+)+$", "(a+)+b", "(a|aa)+c", "(a*)*b"])
def test_patterns_that_backtrack_exponentially_take_linear_time(source: str) -> None:
    pattern = WaitPattern.compile(source)
    text = b"a" * 100_000 + b"!"
    started = time.monotonic()
    assert pattern.search(text, 0) is None
    assert time.monotonic() - started < scaled(0.5)


def test_matched_text_is_at_most_200_characters() -> None:
    assert matched_text(b"x" * 200) == "x" * 200
    assert matched_text(b"x" * 201) == "x" * 199 + "…"
    assert matched_text("é".encode() * 300) == "é" * 199 + "…"


def test_results_carry_the_outcome_and_tombstones_forget_it() -> None:
    result = SessionResult("s", "running", "", "/", 1).waited("matched", "ready")
    body = result.to_body()
    assert (body["wait"], body["matched_text"]) == ("matched", "ready")
    assert SessionResult.from_body(body) == result
    assert "wait" not in result.without_output().fields()
    assert result.waited(None) is result
    with pytest.raises(ProtocolError):
        SessionResult.from_body({**body, "wait": "soon"})
