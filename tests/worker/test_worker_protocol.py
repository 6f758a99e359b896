"""A real worker process over raw ZeroMQ (docs/protocol.md): every request gets one reply
matched by id, typed errors for unusable messages, events on PUB, and the ways it stops."""

from __future__ import annotations

import os
import time
from typing import Any

import msgpack
import pytest

from tests.support.waiting import process_gone, wait_for_value, wait_until
from tests.support.worker_process import RawDealer, WorkerProcess, running_worker
from zodex_protocol import messages, tombstones
from zodex_protocol.envelope import Envelope, WireCodec
from zodex_protocol.errors import ErrorCode
from zodex_protocol.version import PROTOCOL_VERSION
from zodex_system import proctree
from zodex_worker.session import EVENT_BYTES, READ_CHUNK

pytestmark = pytest.mark.timeout(60)


def assert_error(reply: Envelope, code: ErrorCode, re: str | None) -> None:
    assert reply.type == messages.ERROR, reply
    assert reply.body["code"] == code, reply.body
    assert isinstance(reply.body["message"], str) and reply.body["message"]
    assert reply.reply_to == re


def marked_process(handle: str) -> proctree.ProcInfo | None:
    """The session's process, found by the marker the worker puts in its environment."""
    marker = f"{proctree.SESSION_MARKER}={handle}".encode()
    for info in proctree.snapshot().values():
        try:
            with open(f"/proc/{info.pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0") and not info.zombie:
                    return info
        except OSError:
            continue
    return None


def start_sleeper(dealer: RawDealer, workdir: str) -> tuple[str, proctree.ProcInfo]:
    result = dealer.exec("sleep 300", workdir, yield_time_ms=50)
    assert result["status"] == "running", result
    handle = result["session_handle"]
    return handle, wait_for_value(lambda: marked_process(handle), 10, "the session's process")


def test_ping_answers_pong_with_worker_facts(worker: WorkerProcess, dealer: RawDealer) -> None:
    reply = dealer.request(messages.PING, {})
    assert reply.type == messages.PONG
    assert reply.version == PROTOCOL_VERSION
    assert reply.body == {
        "worker_id": worker.worker_id,
        "incarnation": 1,
        "pid": worker.process.pid,
        "workdir": worker.workdir,
        "live_sessions": 0,
    }
    assert worker.record.pid == worker.process.pid
    assert worker.record.protocol == PROTOCOL_VERSION


def test_unknown_type_and_non_map_body(dealer: RawDealer) -> None:
    reply = dealer.request("frobnicate", {})
    assert_error(reply, ErrorCode.UNKNOWN_TYPE, reply.reply_to)
    assert "frobnicate" in reply.body["message"]
    for body in ([1, 2], "text", None):
        sent = dealer.send(Envelope(type=messages.PING, body=body))
        assert_error(dealer.recv(), ErrorCode.BAD_REQUEST, sent.id)


def test_wrong_key_gets_bad_signature_naming_the_id(dealer: RawDealer) -> None:
    stranger = WireCodec(b"k" * 32)
    sent = dealer.send(Envelope(type=messages.PING, body={}), codec=stranger)
    assert_error(dealer.recv(), ErrorCode.BAD_SIGNATURE, sent.id)
    assert dealer.request(messages.PING, {}).type == messages.PONG, "the worker keeps serving"


def test_replayed_and_stale_messages_are_refused(dealer: RawDealer) -> None:
    envelope = Envelope(type=messages.PING, body={})
    frames = dealer.codec.serialize(envelope)
    dealer.send_frames(frames)
    assert dealer.recv().type == messages.PONG
    dealer.send_frames(frames)
    assert_error(dealer.recv(), ErrorCode.REPLAYED, envelope.id)
    stale = dealer.send(Envelope(type=messages.PING, body={}, time=time.time() - 120))
    assert_error(dealer.recv(), ErrorCode.REPLAYED, stale.id)


def test_other_protocol_version_is_refused(dealer: RawDealer) -> None:
    sent = dealer.send(Envelope(type=messages.PING, body={}, version=PROTOCOL_VERSION + 1))
    assert_error(dealer.recv(), ErrorCode.VERSION_MISMATCH, sent.id)


def test_malformed_messages_still_get_an_answer(dealer: RawDealer) -> None:
    sent = Envelope(type=messages.PING, body={})
    dealer.send_frames([b"extra", *dealer.codec.serialize(sent)])
    assert_error(dealer.recv(), ErrorCode.MALFORMED, sent.id)
    partial = msgpack.packb({"id": "abc123", "type": "ping"})
    dealer.send_frames([dealer.codec.sign(partial), partial])
    assert_error(dealer.recv(), ErrorCode.MALFORMED, "abc123")
    dealer.send_frames([dealer.codec.sign(b"\xc1"), b"\xc1"])
    assert_error(dealer.recv(), ErrorCode.MALFORMED, None)


def test_requests_in_flight_are_answered_by_id_not_order(worker: WorkerProcess, dealer: RawDealer) -> None:
    handle, _ = start_sleeper(dealer, worker.workdir)
    try:
        slow = dealer.send(
            Envelope(type=messages.WRITE, body={"session_handle": handle, "yield_time_ms": 2000})
        )
        fast = dealer.send(Envelope(type=messages.PING, body={}))
        first, second = dealer.recv(), dealer.recv()
        assert (first.type, first.reply_to) == (messages.PONG, fast.id)
        assert first.body["live_sessions"] == 1
        assert (second.type, second.reply_to) == (messages.RESULT, slow.id)
        assert second.body["status"] == "running"
    finally:
        killed = dealer.request(messages.WRITE, {"session_handle": handle, "kill_process": True}, timeout=20)
    assert killed.body["termination_reason"] == "killed"


def collect_session_events(worker: WorkerProcess, cmd: str) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Run ``cmd`` once the subscription is live; return its result and its events in order."""
    sub = worker.subscriber()
    dealer = worker.dealer()
    try:

        def warm() -> bool:
            dealer.exec(": warm-up", worker.workdir)
            return sub.next(time.monotonic() + 0.5) is not None

        # PUB drops events until the SUB's subscription arrives: probe for it.
        wait_until(warm, timeout=20, what="the subscription to become live")
        deadline = time.monotonic() + 20
        result = dealer.exec(cmd, worker.workdir)
        events: list[tuple[str, Any]] = []
        session = None
        while not events or events[-1][0] != messages.EVENT_PROCESS_ENDED:
            got = sub.next(deadline)
            assert got is not None, f"events so far: {events}"
            topic, envelope = got
            assert topic == envelope.type
            if envelope.type == messages.EVENT_PROCESS_STARTED and envelope.body["cmd"] == cmd:
                session = envelope.body["session"]
            if session is not None and envelope.body["session"] == session:
                events.append((topic, envelope.body))
        return result, events
    finally:
        sub.socket.close(linger=0)
        dealer.socket.close(linger=0)


def test_events_for_one_command(worker: WorkerProcess) -> None:
    cmd = r"printf '\033[31mred\033[0m\n'"
    result, events = collect_session_events(worker, cmd)
    assert result["output"] == "red\n", "results are cleaned"
    (kind, started), *middle, (end_kind, ended) = events
    assert kind == messages.EVENT_PROCESS_STARTED and end_kind == messages.EVENT_PROCESS_ENDED
    handle = started["session"]
    assert handle.startswith(f"{worker.worker_id}1-")
    assert started["cmd"] == cmd and started["cwd"] == worker.workdir
    assert isinstance(started["pid"], int) and started["pid"] > 0
    assert {k for k, _ in middle} == {messages.EVENT_OUTPUT}
    raw = "".join(body["text"] for _, body in middle)
    assert "\x1b[31mred\x1b[0m" in raw, "events carry the raw stream, escapes intact"
    assert ended["session"] == handle
    assert (ended["exit_code"], ended["signal"], ended["reason"], ended["background"]) == (0, None, "exit", 0)
    assert ended["ended_at"] >= started["started_at"]


def test_a_flood_of_output_comes_in_few_bounded_events(worker: WorkerProcess) -> None:
    """Output is coalesced into events of at most about EVENT_BYTES (one PTY read beyond it),
    each stream's text arriving whole and in order (docs/protocol.md#events-xpub)."""
    total = 2 * 1024 * 1024
    result, events = collect_session_events(worker, f"head -c {total} /dev/zero | tr '\\0' x")
    assert result["exit_code"] == 0
    texts = [body["text"] for kind, body in events if kind == messages.EVENT_OUTPUT]
    assert "".join(texts) == "x" * total
    assert max(len(text) for text in texts) <= EVENT_BYTES + READ_CHUNK
    assert [body["seq"] for kind, body in events if kind == messages.EVENT_OUTPUT] == list(
        range(1, len(texts) + 1)
    )


def test_shutdown_says_bye_kills_sessions_and_leaves_tombstones() -> None:
    with running_worker() as worker:
        dealer = worker.dealer()
        handle, sleeper = start_sleeper(dealer, worker.workdir)
        reply = dealer.request(messages.SHUTDOWN, {}, timeout=20)
        assert (reply.type, reply.body) == (messages.BYE, {})
        assert worker.wait_exit() == 0
        assert process_gone(sleeper.pid, sleeper.start), "bye is sent after the processes are gone"
        stones = msgpack.unpackb(worker.exit_file.read_bytes(), raw=False)
        assert stones[handle]["final"]["termination_reason"] == "killed"
        assert stones[handle]["expires_at"] > time.time()
        assert os.stat(worker.exit_file).st_mode & 0o777 == 0o600
        answer = tombstones.answer_from_file(worker.exit_file, handle)
        assert answer is not None and answer.termination_reason == "killed" and answer.output == ""


def test_owner_gone_stops_worker_and_its_sessions() -> None:
    with running_worker() as worker:
        dealer = worker.dealer()
        _, sleeper = start_sleeper(dealer, worker.workdir)
        worker.release_owner_lock()
        assert worker.wait_exit(20) == 0
        wait_until(lambda: process_gone(sleeper.pid, sleeper.start), 10, "the session's sleep to die")
        assert worker.exit_file.exists()


def test_idle_worker_exits_after_its_last_session() -> None:
    with running_worker({"idle_worker_exit_s": 2}) as worker:
        dealer = worker.dealer()
        result = dealer.exec("sleep 3", worker.workdir, yield_time_ms=50)
        handle = result["session_handle"]
        while result["status"] == "running":  # alive past its idle limit while a session runs
            result = dealer.request(messages.WRITE, {"session_handle": handle, "yield_time_ms": 5000}).body
        ended = time.monotonic()
        assert result["exit_code"] == 0
        assert worker.wait_exit(15) == 0
        assert time.monotonic() - ended >= 1.0, "the idle clock starts when the last session ends"
        assert worker.exit_file.exists()
