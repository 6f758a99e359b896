"""A host's ROUTER and a gateway's RemoteDispatcher on loopback, in one process, with a
recording dispatcher behind the host: the call, its reply or error, the incarnation
check, ZAP refusing an unknown key, and a host that goes away failing calls within 3 s
(docs/fleet.md#the-wire, docs/fleet.md#failures). No root needed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import zmq
import zmq.asyncio

from tests.support.curve_peer import refused_handshake
from zodex_gateway.fleet.host_server import HANDSHAKE_IVL_MS, HostServer, IncarnationCheck
from zodex_gateway.fleet.remote import RemoteDispatcher
from zodex_gateway.workers.worker_client import ProgressListener
from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec, new_key
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import SessionHandle
from zodex_protocol.limits import Limits, max_message_bytes
from zodex_protocol.progress import ProgressNote
from zodex_protocol.replies import Patched, SessionResult

RESULT = SessionResult(
    summary="exited", status="exited", output="hi\n", cwd="/w", wall_time_ms=3, exit_code=0
)


@dataclass
class Recorder:
    calls: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)
    # A call with cmd "wait" waits here, as a worker's wait does, until released or cancelled.
    waiting: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    listeners: list[ProgressListener | None] = field(default_factory=list)
    cancelled: int = 0
    cancel_seen: asyncio.Event = field(default_factory=asyncio.Event)

    async def exec_command(
        self, args: Mapping[str, Any], *, tag: str | None = None, progress: Any = None, workdir: Any = None
    ) -> SessionResult:
        self.calls.append(("exec_command", dict(args), tag))
        if args.get("cmd") == "":
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, "cmd must not be empty")
        if args.get("cmd") == "wait":
            self.listeners.append(progress)
            if progress is not None:
                progress.heard(ProgressNote("h1", 1000, 12))
                progress.heard(ProgressNote("h1", 2000, 1234))
            self.waiting.set()
            try:
                await self.released.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                self.cancel_seen.set()
                raise
        return RESULT

    async def write_stdin(self, args: Mapping[str, Any], *, progress: Any = None) -> SessionResult:
        self.calls.append(("write_stdin", dict(args), None))
        return RESULT

    async def apply_patch(self, args: Mapping[str, Any], *, workdir: Any = None) -> Patched:
        if args.get("patch") == "wait":
            self.waiting.set()
            await self.released.wait()
        return Patched(ok=True, text="Done!")

    async def close(self) -> None:
        pass


@dataclass
class Wire:
    recorder: Recorder
    server: HostServer
    serving: asyncio.Task[None]
    gateway: RemoteDispatcher
    host_public: bytes
    signing: bytes
    gateway_secret: bytes


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    host_public, host_secret = zmq.curve_keypair()
    gw_public, gw_secret = zmq.curve_keypair()
    signing = new_key()
    recorder = Recorder()
    server = HostServer(
        IncarnationCheck(recorder, "alpha", "cur000", {"old000"}, Limits()),
        endpoint="tcp://127.0.0.1:*",
        secret_key=host_secret,
        signing_key=signing,
        gateway_keys={gw_public},
    )
    serving = asyncio.create_task(server.serve())
    context = zmq.asyncio.Context()
    gateway = RemoteDispatcher(
        "alpha",
        server.bound,
        context=context,
        secret_key=gw_secret,
        host_public_key=host_public,
        signing_key=signing,
    )
    try:
        yield Wire(recorder, server, serving, gateway, host_public, signing, gw_secret)
    finally:
        await gateway.close()
        server.stop()
        await serving
        context.term()


async def test_a_call_reaches_the_host_and_its_reply_or_error_comes_back(wire: Wire) -> None:
    assert (
        await wire.gateway.exec_command({"cmd": "echo hi", "workdir": "/w", "extra": 1}, tag="t1") == RESULT
    )
    assert wire.recorder.calls == [("exec_command", {"cmd": "echo hi", "workdir": "/w", "extra": 1}, "t1")]
    assert (await wire.gateway.apply_patch({"patch": "x", "workdir": "/w"})).text == "Done!"
    with pytest.raises(ProtocolError) as refused:
        await wire.gateway.exec_command({"cmd": "", "workdir": "/w"})
    assert (refused.value.code, refused.value.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "cmd must not be empty",
    )


async def test_handles_of_earlier_host_incarnations_are_lost_and_others_unknown(wire: Wire) -> None:
    current = str(SessionHandle.new("abcdefg", 1, "cur000"))
    assert await wire.gateway.write_stdin({"session_handle": current}) == RESULT
    old = str(SessionHandle.new("abcdefg", 1, "old000"))
    with pytest.raises(ProtocolError) as lost:
        await wire.gateway.write_stdin({"session_handle": old})
    assert lost.value.code == ErrorCode.SESSION_LOST
    assert lost.value.message == (
        f"session {old} was lost: host alpha restarted since the command started; start the command again"
    )
    for never in (str(SessionHandle.new("abcdefg", 1, "zzz999")), str(SessionHandle.new("abcdefg", 1)), "x"):
        with pytest.raises(ProtocolError) as unknown:
            await wire.gateway.write_stdin({"session_handle": never})
        assert unknown.value.message == f"Unknown session handle: {never}"
    assert [c[0] for c in wire.recorder.calls] == ["write_stdin"]  # only the current one went on


async def test_a_waiting_call_hears_the_hosts_progress_and_its_cancel_ends_the_hosts_wait(wire: Wire) -> None:
    """docs/fleet.md#the-wire: ``_progress`` asked with the call (at least 500 ms), each
    note relayed to the gateway's listener, and a cancelled call cancels the host's wait."""
    heard: list[ProgressNote] = []
    both = asyncio.Event()

    def hear(note: ProgressNote) -> None:
        heard.append(note)
        if len(heard) == 2:
            both.set()

    listener = ProgressListener(100, hear)
    call = asyncio.create_task(wire.gateway.exec_command({"cmd": "wait", "workdir": "/w"}, progress=listener))
    await wire.recorder.waiting.wait()
    [asked] = wire.recorder.listeners
    assert asked is not None and asked.every_ms == messages.MIN_PROGRESS_MS
    async with asyncio.timeout(30):
        await both.wait()
    assert heard == [ProgressNote("h1", 1000, 12), ProgressNote("h1", 2000, 1234)]
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    async with asyncio.timeout(30):
        await wire.recorder.cancel_seen.wait()
    # Without a listener nothing is asked.
    wire.recorder.waiting.clear()
    wire.recorder.released.set()
    assert await wire.gateway.exec_command({"cmd": "wait", "workdir": "/w"}) == RESULT
    assert wire.recorder.listeners[1] is None


async def test_a_cancel_ends_only_a_call_of_the_gateway_that_sent_it(wire: Wire) -> None:
    """A second peer naming the first's call id cancels nothing; the first's own cancel does,
    and its call then gets no reply. A malformed ``_progress`` is refused as a bad request."""
    codec = WireCodec(wire.signing)
    context = zmq.asyncio.Context()
    peers = []
    try:
        for _ in range(2):
            peer = context.socket(zmq.DEALER)
            peer.setsockopt(zmq.LINGER, 0)
            peer.curve_secretkey = wire.gateway_secret
            peer.curve_publickey = zmq.curve_public(wire.gateway_secret)
            peer.curve_serverkey = wire.host_public
            peer.connect(wire.server.bound)
            peers.append(peer)
        first, second = peers
        call = Envelope(
            type=messages.CALL, body={"tool": "exec_command", "args": {"cmd": "wait", "workdir": "/w"}}
        )
        await first.send_multipart(codec.serialize(call))
        async with asyncio.timeout(30):
            await wire.recorder.waiting.wait()
        cancel = Envelope(type=messages.CANCEL, body={"id": call.id})
        await second.send_multipart(codec.serialize(cancel))
        # The second peer's cancel is served before its next message, whose answer proves it.
        bad = Envelope(
            type=messages.CALL,
            body={
                "tool": "exec_command",
                "args": {"cmd": "x", "workdir": "/w"},
                messages.PROGRESS_KEY: "soon",
            },
        )
        await second.send_multipart(codec.serialize(bad))
        async with asyncio.timeout(30):
            refused = codec.deserialize(await second.recv_multipart())
        assert (refused.type, refused.reply_to) == (messages.ERROR, bad.id)
        assert ProtocolError.from_wire(refused.body).code == ErrorCode.BAD_REQUEST
        assert wire.recorder.cancelled == 0, "another peer's cancel ended the call"
        await first.send_multipart(codec.serialize(Envelope(type=messages.CANCEL, body={"id": call.id})))
        async with asyncio.timeout(30):
            await wire.recorder.cancel_seen.wait()
        # A reply to the cancelled call would come before the answer to a later request.
        probe = Envelope(type=messages.CALL, body={"tool": "nothing", "args": {}})
        await first.send_multipart(codec.serialize(probe))
        async with asyncio.timeout(30):
            answered = codec.deserialize(await first.recv_multipart())
        assert answered.reply_to == probe.id, "a cancelled call got a reply"
        # A patch is not a wait: a cancel naming it ends nothing, and it gets its reply.
        wire.recorder.waiting.clear()
        patch = Envelope(
            type=messages.CALL, body={"tool": "apply_patch", "args": {"patch": "wait", "workdir": "/w"}}
        )
        await first.send_multipart(codec.serialize(patch))
        async with asyncio.timeout(30):
            await wire.recorder.waiting.wait()
        await first.send_multipart(codec.serialize(Envelope(type=messages.CANCEL, body={"id": patch.id})))
        # The host serves a peer's messages in order: once a later probe is answered, the
        # cancel has been handled, and only then is the patch let go.
        probe = Envelope(type=messages.CALL, body={"tool": "nothing", "args": {}})
        await first.send_multipart(codec.serialize(probe))
        async with asyncio.timeout(30):
            assert codec.deserialize(await first.recv_multipart()).reply_to == probe.id
        wire.recorder.released.set()
        async with asyncio.timeout(30):
            patched = codec.deserialize(await first.recv_multipart())
        assert (patched.type, patched.reply_to) == (messages.PATCHED, patch.id)
    finally:
        for peer in peers:
            peer.close(linger=0)
        context.term()


async def test_the_host_checks_write_arguments_before_the_handle(wire: Wire) -> None:
    old = str(SessionHandle.new("abcdefg", 1, "old000"))
    refusals = {
        "session_handle is too long (40 characters; the limit is 32)": {"session_handle": "x" * 40},
        "kill_process must be a boolean": {"session_handle": old, "kill_process": "yes"},
        "session_handle must be a string": {"session_handle": 7},
    }
    for message, args in refusals.items():
        with pytest.raises(ProtocolError) as refused:
            await wire.gateway.write_stdin(args)
        assert (refused.value.code, refused.value.message) == (ErrorCode.INVALID_ARGUMENT, message)
    assert wire.recorder.calls == []


async def test_a_gateway_key_the_host_does_not_allow_gets_nothing(wire: Wire) -> None:
    _public, stranger_secret = zmq.curve_keypair()
    context = zmq.asyncio.Context()
    stranger = RemoteDispatcher(
        "alpha",
        wire.server.bound,
        context=context,
        secret_key=stranger_secret,
        host_public_key=wire.host_public,
        signing_key=wire.signing,
    )
    try:
        started = time.monotonic()
        with pytest.raises(ProtocolError) as refused:
            await stranger.exec_command({"cmd": "true", "workdir": "/w"})
        assert time.monotonic() - started < 3.0
        assert refused.value.message.startswith("host alpha is unreachable; the call was not sent.")
        assert wire.recorder.calls == []
    finally:
        await stranger.close()
        context.term()


async def test_a_key_refused_again_and_again_is_logged_once_then_summed(
    wire: Wire, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "zodex.host")
    public, secret = zmq.curve_keypair()
    key = public.decode()
    for _ in range(5):
        await refused_handshake(wire.server.bound, wire.host_public, public, secret)
    about_it = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert about_it == [f"refused a gateway whose key is not allowed: {key}"]
    wire.server.stop()  # the rest of the count is logged when the host stops
    await wire.serving
    about_it = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert about_it[1:] == [
        f"refused a gateway whose key is not allowed: {key} (4 more attempts since the last line about it)"
    ]


def _port(wire: Wire) -> int:
    return int(wire.server.bound.rsplit(":", 1)[1])


_CURVE_GREETING = b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"CURVE".ljust(20, b"\x00") + bytes(32)


async def test_a_peer_that_never_authenticated_cannot_make_the_host_buffer_a_huge_frame(wire: Wire) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(wire))
    try:
        # A command frame claiming 1 GiB: without a size limit ZeroMQ would buffer all of it
        # for a peer that has not even finished the handshake.
        writer.write(_CURVE_GREETING + b"\x06" + (1024**3).to_bytes(8, "big"))
        await writer.drain()
        assert max_message_bytes(Limits()) < 1024**3
        async with asyncio.timeout(3.0):
            while await reader.read(65536):
                pass  # the host's greeting, then end of stream: it dropped the connection
    finally:
        writer.close()
    assert await wire.gateway.exec_command({"cmd": "true", "workdir": "/w"}) == RESULT


async def test_a_peer_that_connects_and_never_sends_is_dropped(wire: Wire) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(wire))
    started = time.monotonic()
    try:
        async with asyncio.timeout(HANDSHAKE_IVL_MS / 1000 + 3.0):
            while await reader.read(65536):
                pass
    finally:
        writer.close()
    assert time.monotonic() - started >= HANDSHAKE_IVL_MS / 1000 - 0.5
    assert await wire.gateway.exec_command({"cmd": "true", "workdir": "/w"}) == RESULT


async def test_a_host_that_goes_away_fails_calls_within_3_seconds(wire: Wire) -> None:
    assert await wire.gateway.exec_command({"cmd": "true", "workdir": "/w"}) == RESULT
    wire.server.stop()
    await wire.serving
    started = time.monotonic()
    with pytest.raises(ProtocolError) as down:
        await wire.gateway.exec_command({"cmd": "true", "workdir": "/w"})
    assert time.monotonic() - started < 3.0
    assert down.value.code == ErrorCode.WORKER_UNAVAILABLE and down.value.is_tool_level
    assert down.value.message.startswith("host alpha is unreachable; ")
