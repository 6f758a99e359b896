"""A person's keystrokes (``person``) on a real worker: written to the PTY, hidden when the
terminal has echo off, told to the model in its next result, and never waiting for the
model's poll in progress (docs/protocol.md#requests-and-replies)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.worker_process import RawDealer, WorkerProcess
from zodex_protocol import messages
from zodex_protocol.envelope import Envelope
from zodex_protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(60)


def person(dealer: RawDealer, handle: str, chars: Any) -> Envelope:
    return dealer.request(messages.PERSON, {"session_handle": handle, "chars": chars})


def poll_until(dealer: RawDealer, handle: str, text: str, seen: str = "") -> list[dict[str, Any]]:
    """Poll until ``text`` came, counting what an earlier result showed (``seen``)."""
    if text in seen:
        return []
    results: list[dict[str, Any]] = []
    for _ in range(20):
        reply = dealer.request(messages.WRITE, {"session_handle": handle, "yield_time_ms": 2000}, timeout=30)
        assert reply.type == messages.RESULT, reply
        results.append(reply.body)
        if text in seen + "".join(r["output"] for r in results):
            return results
    raise AssertionError(f"{text!r} never came: {results}")


def told(results: list[dict[str, Any]]) -> list[tuple[str | None, bool]]:
    return [(e["text"], e["hidden"]) for r in results for e in r.get("human_input", [])]


def test_input_with_echo_on_is_typed_and_told_once(worker: WorkerProcess, dealer: RawDealer) -> None:
    started = dealer.exec('read -r x; echo "x=$x"; sleep 300', worker.workdir, yield_time_ms=200)
    handle = started["session_handle"]
    reply = person(dealer, handle, "plain words\r")
    assert reply.type == messages.TYPED, reply
    assert reply.body["hidden"] is False and reply.body["text"] == "plain words\r"
    assert reply.body["chars"] == 12 and reply.body["at"].endswith("Z")
    results = poll_until(dealer, handle, "x=plain words")
    assert told(results) == [("plain words\r", False)]
    again = dealer.request(messages.WRITE, {"session_handle": handle, "yield_time_ms": 100}).body
    assert "human_input" not in again
    dealer.request(messages.WRITE, {"session_handle": handle, "kill_process": True}, timeout=30)


def test_input_with_echo_off_keeps_no_characters(worker: WorkerProcess, dealer: RawDealer) -> None:
    cmd = 'stty -echo; echo ready; read -r x; echo "len=${#x}"; sleep 300'
    started = dealer.exec(cmd, worker.workdir, yield_time_ms=200)
    handle = started["session_handle"]
    poll_until(dealer, handle, "ready", started["output"])
    reply = person(dealer, handle, "s3cr3t-v4lue\r")
    assert reply.type == messages.TYPED, reply
    assert reply.body["hidden"] is True and reply.body["text"] is None and reply.body["chars"] == 13
    results = poll_until(dealer, handle, "len=12")
    assert told(results) == [(None, True)]
    assert "s3cr3t" not in repr(results)
    dealer.request(messages.WRITE, {"session_handle": handle, "kill_process": True}, timeout=30)


def test_input_ends_a_poll_in_progress(worker: WorkerProcess, dealer: RawDealer) -> None:
    started = dealer.exec("read -r x; echo got-it; sleep 300", worker.workdir, yield_time_ms=200)
    handle = started["session_handle"]
    # The model's poll waits up to 30 s, holding the session; the person's input is not held up.
    polling = dealer.send(
        Envelope(type=messages.WRITE, body={"session_handle": handle, "yield_time_ms": 30000})
    )
    other = worker.dealer()
    try:
        began = time.monotonic()
        assert person(other, handle, "now\r").type == messages.TYPED
        reply = dealer.recv(timeout=20)
        assert time.monotonic() - began < 20
    finally:
        other.socket.close(linger=0)
    assert reply.reply_to == polling.id and "got-it" in reply.body["output"], reply
    assert told([reply.body]) == [("now\r", False)]
    dealer.request(messages.WRITE, {"session_handle": handle, "kill_process": True}, timeout=30)


def test_bad_input_is_refused_and_types_nothing(worker: WorkerProcess, dealer: RawDealer) -> None:
    started = dealer.exec("cat", worker.workdir, yield_time_ms=200)
    handle = started["session_handle"]
    for chars in ("", 7, None):
        reply = person(dealer, handle, chars)
        assert reply.type == messages.ERROR and reply.body["code"] == ErrorCode.INVALID_ARGUMENT, reply
    unknown = person(dealer, "nobody-knows-this", "x")
    assert unknown.type == messages.ERROR and unknown.body["code"] == ErrorCode.UNKNOWN_HANDLE
    quiet = dealer.request(messages.WRITE, {"session_handle": handle, "yield_time_ms": 300}).body
    assert quiet["output"] == "" and "human_input" not in quiet
    dealer.request(messages.WRITE, {"session_handle": handle, "kill_process": True}, timeout=30)
    ended = person(dealer, handle, "late\r")
    assert ended.type == messages.ERROR and ended.body["code"] == ErrorCode.INVALID_ARGUMENT
    assert ended.body["message"] == f"the command in session {handle} has ended; nothing was typed"


def test_a_taken_over_session_refuses_the_models_characters_until_given_back(
    worker: WorkerProcess, dealer: RawDealer
) -> None:
    started = dealer.exec('while read -r x; do echo "x=$x"; done', worker.workdir, yield_time_ms=200)
    handle = started["session_handle"]

    def take(taken: bool) -> Envelope:
        return dealer.request(messages.TAKE_OVER, {"session_handle": handle, "taken": taken})

    def model_types(chars: str) -> Envelope:
        return dealer.request(
            messages.WRITE, {"session_handle": handle, "chars": chars, "yield_time_ms": 500}, timeout=30
        )

    assert take(True).body == {"session_handle": handle, "taken": True}
    refused = model_types("from the model\r")
    assert refused.type == messages.ERROR and refused.body["code"] == ErrorCode.INVALID_ARGUMENT
    assert (
        refused.body["message"]
        == f"a person has taken over session {handle}; poll it to watch (no characters)"
    )
    assert person(dealer, handle, "from the person\r").type == messages.TYPED
    watching = poll_until(dealer, handle, "x=from the person")
    assert all(r["taken_over"] is True for r in watching)
    assert watching[-1]["summary"].endswith("; a person has taken over this session: poll to watch")
    assert "from the model" not in repr(watching)
    assert take(False).body == {"session_handle": handle, "taken": False}
    back = model_types("again\r").body
    assert back["taken_over"] is False and back["summary"].endswith("you may type again"), back
    later = poll_until(dealer, handle, "x=again", back["output"])
    assert all("taken_over" not in r for r in later)  # said once
    assert take(False).body["taken"] is False  # giving back a session not held changes nothing
    dealer.request(messages.WRITE, {"session_handle": handle, "kill_process": True}, timeout=30)
    ended = take(True)
    assert ended.type == messages.ERROR
    assert (
        ended.body["message"] == f"the command in session {handle} has ended; there is nothing to take over"
    )
