"""Typed bodies of docs/protocol.md: what the worker builds is what the gateway reads back,
field for field and key order included; a body that breaks the contract is refused with
one line naming the field; unknown keys are ignored."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import msgpack
import pytest

from zodex_protocol import messages
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.events import OutputEvent, ProcessEnded, ProcessStarted, WorkerEvent, decode_event
from zodex_protocol.limits import Limits
from zodex_protocol.replies import EvictedSession, Patched, PatchedFile, Pong, SessionResult, SpilledOutput
from zodex_protocol.requests import ExecRequest, PatchRequest, WriteRequest

LIMITS = Limits()


def wire(body: dict[str, Any]) -> Any:
    """Through msgpack, as a peer receives it (tuples become lists)."""
    return msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False)


def refused(read: Any, body: Any, code: ErrorCode = ErrorCode.BAD_REQUEST) -> str:
    with pytest.raises(ProtocolError) as info:
        read(body)
    assert info.value.code == code
    assert "\n" not in info.value.message
    return info.value.message


# ---- requests ---------------------------------------------------------------------------


def test_exec_request_from_args_ignores_a_models_tag_and_sends_only_known_keys(tmp_path: Path) -> None:
    args = {"cmd": "ls", "workdir": str(tmp_path), "_tag": "model's", "max_output_tokens": 5}
    request = ExecRequest.from_args(args, LIMITS, tag="inv1")
    assert request.tag == "inv1" and request.real_workdir == str(tmp_path.resolve())
    assert request.to_body() == {"cmd": "ls", "workdir": str(tmp_path), "_tag": "inv1"}
    untagged = ExecRequest.from_args({**args, "yield_time_ms": 50, "timeout_ms": None}, LIMITS)
    assert untagged.to_body() == {"cmd": "ls", "workdir": str(tmp_path), "yield_time_ms": 50}


def test_exec_request_round_trip_and_tag_rules(tmp_path: Path) -> None:
    sent = ExecRequest("echo hi", str(tmp_path), str(tmp_path), yield_time_ms=70, timeout_ms=9000, tag="t")
    assert ExecRequest.from_body(wire(sent.to_body()), LIMITS) == sent
    body = {"cmd": "true", "workdir": str(tmp_path)}
    assert refused(
        lambda b: ExecRequest.from_body(b, LIMITS), {**body, "_tag": 7}, ErrorCode.INVALID_ARGUMENT
    ) == ("_tag must be a string")
    long_tag = {**body, "_tag": "x" * (messages.MAX_TAG_CHARS + 1)}
    assert refused(
        lambda b: ExecRequest.from_body(b, LIMITS), long_tag, ErrorCode.INVALID_ARGUMENT
    ).startswith("_tag is too long")
    assert refused(lambda b: ExecRequest.from_body(b, LIMITS), ["ls"]) == "exec needs a map body"


def test_argument_rules_apply_on_both_sides(tmp_path: Path) -> None:
    for read in (ExecRequest.from_args, ExecRequest.from_body):
        message = refused(
            partial(read, limits=LIMITS), {"cmd": "", "workdir": str(tmp_path)}, ErrorCode.INVALID_ARGUMENT
        )
        assert message == "cmd must not be empty"
    for read_write in (WriteRequest.from_args, WriteRequest.from_body):
        assert refused(partial(read_write, limits=LIMITS), {}, ErrorCode.INVALID_ARGUMENT) == (
            "session_handle is required"
        )
    bad_kill = {"session_handle": "h", "kill_process": "yes"}
    assert refused(lambda b: WriteRequest.from_body(b, LIMITS), bad_kill, ErrorCode.INVALID_ARGUMENT) == (
        "kill_process must be a boolean"
    )


def test_write_request_defaults_and_round_trip() -> None:
    poll = WriteRequest.from_body({"session_handle": "h", "chars": None}, LIMITS)
    assert poll == WriteRequest("h") and (poll.chars, poll.kill_process) == ("", False)
    assert poll.to_body() == {"session_handle": "h"}
    typed = WriteRequest("h", chars="\u0003", yield_time_ms=0, kill_process=True)
    assert WriteRequest.from_body(wire(typed.to_body()), LIMITS) == typed


def test_patch_request_round_trip(tmp_path: Path) -> None:
    sent = PatchRequest("*** Begin Patch\n*** End Patch", str(tmp_path), str(tmp_path))
    assert sent.to_body() == {"patch": sent.patch, "workdir": str(tmp_path)}
    assert PatchRequest.from_body(wire(sent.to_body()), LIMITS) == sent


# ---- replies ----------------------------------------------------------------------------


def test_pong_round_trip_and_refusals() -> None:
    pong = Pong(worker_id="abcdefg", incarnation=3, pid=42, workdir="/w", live_sessions=2)
    assert Pong.from_body(wire({**pong.to_body(), "later_field": 1})) == pong
    assert (
        refused(Pong.from_body, {**pong.to_body(), "live_sessions": "2"})
        == "pong: live_sessions must be an integer"
    )
    assert refused(Pong.from_body, {**pong.to_body(), "pid": True}) == "pong: pid must be an integer"
    assert refused(Pong.from_body, None) == "pong needs a map body"


RUNNING = SessionResult(
    summary="still running after 1.0s; use session_handle h1 to poll",
    status="running",
    output="partial",
    cwd="/w",
    wall_time_ms=1000,
    session_handle="h1",
)
FULL = SessionResult(
    summary="exited 0 after 2.0s; 1 background process still running; evicted h0 to make room",
    status="exited",
    output="done\n",
    cwd="/w",
    wall_time_ms=2000,
    exit_code=-1,
    signal="SIGTERM",
    termination_reason="timeout",
    background_processes=1,
    session_handle="h1",
    spilled=SpilledOutput(
        output_chars=20_000,
        output_lines=3,
        output_file="/s/f",
        output_file_truncated=True,
        output_file_error="ENOSPC",
    ),
    evicted_session=EvictedSession("h0", "sleep 9"),
)


def test_result_fields_keep_the_order_results_always_had() -> None:
    assert list(RUNNING.fields()) == ["summary", "status", "output", "cwd", "wall_time_ms", "session_handle"]
    assert list(FULL.fields()) == [
        "summary",
        "status",
        "output",
        "cwd",
        "wall_time_ms",
        "exit_code",
        "signal",
        "termination_reason",
        "background_processes",
        "session_handle",
        "output_file",
        "output_chars",
        "output_lines",
        "output_file_truncated",
        "output_file_error",
        "evicted_session",
    ]
    assert FULL.fields()["evicted_session"] == {"session_handle": "h0", "cmd": "sleep 9"}
    no_file = SpilledOutput(output_chars=5, output_lines=1, output_file_error="Not a directory")
    assert no_file.fields() == {"output_chars": 5, "output_lines": 1, "output_file_error": "Not a directory"}


def test_result_round_trip_and_the_wire_only_session() -> None:
    for result in (RUNNING, FULL):
        assert SessionResult.from_body(wire(result.to_body())) == result
    ended = SessionResult(
        "exited 0 after 0.1s", "exited", "", "/w", 100, exit_code=0, termination_reason="exit"
    )
    tagged = SessionResult.from_body(wire({**ended.to_body(), messages.SESSION_KEY: "h2"}))
    assert tagged.session == "h2" and messages.SESSION_KEY not in tagged.fields()
    assert tagged.to_body()[messages.SESSION_KEY] == "h2"
    assert tagged.without_output() == ended and FULL.without_output().output == ""


def test_result_refusals_name_the_field() -> None:
    body = RUNNING.to_body()
    assert (
        refused(SessionResult.from_body, {**body, "status": "paused"})
        == "result: status must be running or exited"
    )
    assert refused(SessionResult.from_body, {k: v for k, v in body.items() if k != "cwd"}) == (
        "result: cwd must be a string"
    )
    assert refused(SessionResult.from_body, {**body, "termination_reason": "crashed"}) == (
        "result: termination_reason must be exit or timeout or killed"
    )
    assert refused(SessionResult.from_body, {**body, "evicted_session": {"cmd": "x"}}) == (
        "result: evicted_session: session_handle must be a string"
    )


def test_patched_round_trip_and_refusals() -> None:
    patched = Patched(
        ok=True,
        text="Success. Updated the following files:\nM /w/a",
        files=(
            PatchedFile("renamed", "/w/b", "/w/a", 1, 2, ("-x", "+y")),
            PatchedFile("created", "/w/c", None, 1, 0, ()),
        ),
    )
    assert Patched.from_body(wire(patched.to_body())) == patched
    body = patched.to_body()
    assert refused(Patched.from_body, {**body, "files": [{**body["files"][0], "diff": [1]}]}) == (
        "patched: files[0]: diff must be a list of strings"
    )
    assert refused(
        Patched.from_body, {**body, "files": [{**body["files"][0], "operation": "moved"}]}
    ).startswith("patched: files[0]: operation must be created or edited")
    assert refused(Patched.from_body, {**body, "ok": 1}) == "patched: ok must be a boolean"


# ---- events -----------------------------------------------------------------------------


def test_events_round_trip_through_one_decoder() -> None:
    events: list[WorkerEvent] = [
        OutputEvent("h1", 1, "hi\r\n"),
        ProcessStarted("h1", 4242, "echo hi", "/w", 1_700_000_000.25, tag="inv1"),
        ProcessStarted("h2", 4243, "true", "/w", 1_700_000_000.0),
        ProcessEnded("h1", -1, "SIGKILL", "killed", 1_700_000_001.5, background=0, output_events=1),
    ]
    for event in events:
        assert decode_event(event.TYPE, wire(event.to_body())) == event
    assert ProcessStarted("h2", 1, "true", "/w", 1.0).to_body()["tag"] is None, "tag is sent as nil"
    started = decode_event(
        messages.EVENT_PROCESS_STARTED, {**events[1].to_body(), "tag": None, "started_at": 7}
    )
    assert isinstance(started, ProcessStarted) and (started.tag, started.started_at) == (None, 7.0)


def test_malformed_events_are_refused() -> None:
    assert refused(lambda b: decode_event("output", b), {"session": "h", "seq": None, "text": "x"}) == (
        "output: seq must be an integer"
    )
    ended = ProcessEnded("h", 0, None, "exit", 1.0, 0, 0).to_body()
    assert refused(lambda b: decode_event("process_ended", b), {**ended, "reason": "lost"}) == (
        "process_ended: reason must be exit or timeout or killed"
    )
    assert refused(lambda b: decode_event("process_ended", b), {**ended, "ended_at": "now"}) == (
        "process_ended: ended_at must be a number"
    )
    assert refused(lambda b: decode_event("process_paused", b), {}, ErrorCode.UNKNOWN_TYPE) == (
        "unknown event type: process_paused"
    )
