"""The bodies of a person's input (``person``/``typed``) and the ``human_input`` of a result:
read strictly, and hidden input can never carry its characters (docs/protocol.md)."""

from __future__ import annotations

from typing import Any

import pytest

from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.limits import Limits
from zodex_protocol.replies import HumanInput, PersonTyped, SessionResult
from zodex_protocol.requests import PersonInputRequest

LIMITS = Limits(max_chars_chars=10)
RESULT: dict[str, Any] = {"summary": "s", "status": "running", "output": "", "cwd": "/", "wall_time_ms": 1}


def test_a_person_input_request_round_trips() -> None:
    request = PersonInputRequest("h-1", "yes\r")
    assert PersonInputRequest.from_body(request.to_body(), LIMITS) == request


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"session_handle": "h", "chars": ""}, "chars must not be empty"),
        ({"session_handle": "h", "chars": 3}, "chars must be a string"),
        ({"session_handle": "h"}, "chars is required"),
        ({"chars": "x"}, "session_handle is required"),
        ({"session_handle": "h", "chars": "x" * 11}, "chars is too long (11 characters; the limit is 10)"),
    ],
)
def test_a_bad_person_input_request_is_refused(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        PersonInputRequest.from_body(body, LIMITS)
    assert (refused.value.code, refused.value.message) == (ErrorCode.INVALID_ARGUMENT, message)


def test_human_input_is_in_a_result_only_when_there_is_some() -> None:
    plain = SessionResult.from_body(RESULT)
    assert plain.human_input == () and "human_input" not in plain.fields()
    told = SessionResult.from_body(
        {
            **RESULT,
            "human_input": [
                {"at": "t", "text": None, "hidden": True},
                {"at": "u", "text": "a", "hidden": False},
            ],
        }
    )
    assert told.human_input == (HumanInput("t", None, True), HumanInput("u", "a", False))
    assert told.fields()["human_input"] == [
        {"at": "t", "text": None, "hidden": True},
        {"at": "u", "text": "a", "hidden": False},
    ]
    assert "human_input" not in told.without_output().fields()  # a tombstone repeats none


def test_hidden_input_with_text_is_a_protocol_failure() -> None:
    with pytest.raises(ProtocolError) as refused:
        SessionResult.from_body({**RESULT, "human_input": [{"at": "t", "text": "pw", "hidden": True}]})
    assert refused.value.code == ErrorCode.BAD_REQUEST
    with pytest.raises(ProtocolError):
        PersonTyped.from_body({"session_handle": "h", "chars": 2, "at": "t", "text": "pw", "hidden": True})


def test_typed_round_trips() -> None:
    typed = PersonTyped("h", HumanInput("t", None, True), 9)
    assert PersonTyped.from_body(typed.to_body()) == typed
