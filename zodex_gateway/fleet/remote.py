"""A gateway's dispatcher for one fleet host (docs/fleet.md#the-wire): each tool call is
forwarded, as the model sent it, over a DEALER with CURVE client keys to the host, which
checks the arguments and answers with its own workers.

The gateway keeps no state about sessions. What it tracks is the connection: a socket
monitor reports the CURVE handshake done (up) and the connection dropped or refused
(down); ZeroMQ's heartbeat turns a host that stops answering into a dropped connection
within ``HEARTBEAT_TIMEOUT_MS``. A call waits at most ``CONNECT_WAIT_S`` for the host to be
up and is never queued for later; calls in flight when the connection drops fail at once.
A waiting call asks the host for progress notes and, cancelled by its client, tells the
host to end the wait (docs/fleet.md#the-wire), as the gateway does with its own workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from zodex_gateway.fleet.host_server import WAITING_TOOLS
from zodex_gateway.workers.worker_client import ProgressListener
from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec, peek_reply_to
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.limits import Limits
from zodex_protocol.progress import ProgressNote
from zodex_protocol.replies import Patched, SessionResult
from zodex_protocol.validation import CheckedWorkdir

log = logging.getLogger("zodex.gateway")

CONNECT_WAIT_S = 2.5  # plus the heartbeat: a call fails within 3 s of a host going away
HEARTBEAT_IVL_MS = 500
HEARTBEAT_TIMEOUT_MS = 1500
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 1000
# A reply can take the longest yield plus a kill's grace; then slack for a busy host.
REQUEST_SLACK_S = 30.0

_UP = zmq.EVENT_HANDSHAKE_SUCCEEDED
_DOWN = zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
_DOWN_EVENTS = (zmq.EVENT_DISCONNECTED, zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)


def unreachable_not_sent(host: str) -> str:
    return (
        f"host {host} is unreachable; the call was not sent. Retry in a moment; if it persists, the host "
        "or the network between it and this gateway is down (sessions there keep running while the host runs)"
    )


def unreachable_in_flight(host: str) -> str:
    return (
        f"host {host} is unreachable; the connection dropped while the call was in flight, so it may "
        "have run there. Poll its session handle or check the workdir before retrying"
    )


def unverifiable(host: str, reason: str) -> str:
    return (
        f"host {host} answered with a message this gateway cannot verify ({reason}); check that the host "
        "and this gateway use the same signing key and that their clocks agree within 60 s"
    )


class RemoteDispatcher:
    def __init__(
        self,
        host: str,
        endpoint: str,
        *,
        context: zmq.asyncio.Context,
        secret_key: bytes,
        host_public_key: bytes,
        signing_key: bytes,
        limits: Limits | None = None,
    ) -> None:
        self.host = host
        self._codec = WireCodec(signing_key)
        limits = limits or Limits()
        self._timeout = (limits.yield_max_ms + limits.kill_grace_ms) / 1000 + REQUEST_SLACK_S
        self._socket = context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.curve_secretkey = secret_key
        self._socket.curve_publickey = zmq.curve_public(secret_key)
        self._socket.curve_serverkey = host_public_key
        # Never queue a call for a host that is not connected: it would run late, unasked.
        self._socket.setsockopt(zmq.IMMEDIATE, 1)
        self._socket.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        self._socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        self._socket.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        self._socket.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        self._monitor = self._socket.get_monitor_socket(_UP | _DOWN)
        self._socket.connect(endpoint)
        self._up = asyncio.Event()
        self._refused = False  # the last handshake failed on authentication
        self._pending: dict[str, asyncio.Future[Envelope]] = {}
        self._listeners: dict[str, ProgressListener] = {}
        self._cancels: set[asyncio.Future[Any]] = set()  # cancels on their way to the host
        self._loop = asyncio.get_running_loop()
        self._reader = self._loop.create_task(self._read_replies())
        self._watcher = self._loop.create_task(self._watch())

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    async def _watch(self) -> None:
        while True:
            event = parse_monitor_message(await self._monitor.recv_multipart())
            kind = event["event"]
            if kind == _UP:
                if not self._up.is_set():
                    log.info("host %s connected", self.host)
                self._refused = False
                self._up.set()
            elif kind in _DOWN_EVENTS:
                if self._up.is_set():
                    log.warning("host %s disconnected", self.host)
                if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH and not self._refused:
                    log.error("host %s refused this gateway's key (not in its host.gateway-keys)", self.host)
                    self._refused = True
                self._up.clear()
                lost = ProtocolError(ErrorCode.WORKER_UNAVAILABLE, unreachable_in_flight(self.host))
                for future in self._pending.values():
                    if not future.done():
                        future.set_exception(lost)

    async def _read_replies(self) -> None:
        while True:
            frames = await self._socket.recv_multipart()
            try:
                reply = self._codec.deserialize(frames)
            except ProtocolError as exc:
                # CURVE authenticated the host: an unverifiable reply is a configuration
                # mismatch (signing key, clocks), and its call fails now rather than later.
                log.warning("unusable reply from host %s: %s", self.host, exc.message)
                pending = self._pending.get(peek_reply_to(frames) or "")
                if pending is not None and not pending.done():
                    pending.set_exception(ProtocolError(exc.code, unverifiable(self.host, exc.message)))
                continue
            if reply.type == messages.PROGRESS:
                self._heard(reply)
                continue
            future = self._pending.get(reply.reply_to or "")
            if future is not None and not future.done():
                future.set_result(reply)

    def _heard(self, note: Envelope) -> None:
        listener = self._listeners.get(note.reply_to or "")
        if listener is None:
            return  # its call has ended: a note on the way is of no use
        try:
            listener.heard(ProgressNote.from_body(note.body))
        except ProtocolError:
            return  # a malformed note tells nothing; the reply still comes

    def _cancel_on_host(self, message_id: str) -> None:
        """Tell the host to end the wait of ``message_id``; from a task being cancelled,
        which cannot await: the send is tried at once and never waits for room."""
        cancel = Envelope(type=messages.CANCEL, body={"id": message_id})
        sent = asyncio.ensure_future(
            self._socket.send_multipart(self._codec.serialize(cancel), flags=zmq.NOBLOCK)
        )
        self._cancels.add(sent)
        sent.add_done_callback(self._cancel_sent)

    def _cancel_sent(self, sent: asyncio.Future[Any]) -> None:
        self._cancels.discard(sent)
        if not sent.cancelled() and sent.exception() is not None:
            # Not connected: the host's wait ends at its yield, its result unread.
            log.info("could not tell host %s of a cancelled call: %s", self.host, sent.exception())

    async def _call(
        self,
        tool: str,
        args: Mapping[str, Any],
        tag: str | None = None,
        progress: ProgressListener | None = None,
    ) -> Any:
        if not self._up.is_set():
            try:
                await asyncio.wait_for(self._up.wait(), CONNECT_WAIT_S)
            except TimeoutError:
                raise ProtocolError(ErrorCode.WORKER_UNAVAILABLE, unreachable_not_sent(self.host)) from None
        body: dict[str, Any] = {"tool": tool, "args": dict(args)}
        if tag is not None:
            body["tag"] = tag
        if progress is not None:
            body[messages.PROGRESS_KEY] = progress.every_ms
        message = Envelope(type=messages.CALL, body=body)
        future: asyncio.Future[Envelope] = self._loop.create_future()
        self._pending[message.id] = future
        if progress is not None:
            self._listeners[message.id] = progress
        try:
            try:
                await self._socket.send_multipart(self._codec.serialize(message), flags=zmq.NOBLOCK)
            except zmq.Again:  # the connection went between the check and the send
                raise ProtocolError(ErrorCode.WORKER_UNAVAILABLE, unreachable_not_sent(self.host)) from None
            try:
                reply = await asyncio.wait_for(future, self._timeout)
            except TimeoutError:
                raise ProtocolError(ErrorCode.WORKER_UNAVAILABLE, unreachable_in_flight(self.host)) from None
            except asyncio.CancelledError:
                if tool in WAITING_TOOLS:
                    self._cancel_on_host(message.id)
                raise
        finally:
            self._pending.pop(message.id, None)
            self._listeners.pop(message.id, None)
        if reply.type == messages.ERROR:
            raise ProtocolError.from_wire(reply.body)
        return reply.body

    # ``workdir``: the gateway's own check of the path; the host checks it where it is.
    async def exec_command(
        self,
        args: Mapping[str, Any],
        *,
        tag: str | None = None,
        progress: ProgressListener | None = None,
        workdir: CheckedWorkdir | None = None,
    ) -> SessionResult:
        return SessionResult.from_body(await self._call("exec_command", args, tag, progress))

    async def write_stdin(
        self, args: Mapping[str, Any], *, progress: ProgressListener | None = None
    ) -> SessionResult:
        return SessionResult.from_body(await self._call("write_stdin", args, progress=progress))

    async def apply_patch(self, args: Mapping[str, Any], *, workdir: CheckedWorkdir | None = None) -> Patched:
        return Patched.from_body(await self._call("apply_patch", args))

    async def close(self) -> None:
        self._reader.cancel()
        self._watcher.cancel()
        for task in (self._reader, self._watcher):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(zmq.ZMQError):
            self._socket.disable_monitor()
        self._monitor.close(linger=0)
        self._socket.close(linger=0)
