"""One gateway's connection to one worker incarnation.

Requests and replies are matched by message id, so many calls share one DEALER socket
and a long poll never blocks a ping. When the worker's process ends (a pidfd becomes
readable — an event, not a poll), every request still in flight fails with WORKER_LOST.

What comes back is read as the agent's (in Sprite the worker runs as the agent, who holds
the runtime key): the socket takes no message over ``max_message`` bytes (``ZMQ_MAXMSGSIZE``,
from the argument limits), every reply is decoded within bounds, and one over
:data:`OFF_LOOP_BYTES` is verified and decoded on a thread, so no reply stalls the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import zmq
import zmq.asyncio

from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.layout import WorkerRecord
from zodex_protocol.limits import Limits, max_message_bytes
from zodex_protocol.loop_socket import LoopSocket, plain_socket
from zodex_protocol.progress import ProgressNote

OFF_LOOP_BYTES = 1024 * 1024
# The requests that wait on a session, so a cancel can end them (docs/protocol.md).
WAITING_REQUESTS: Final = frozenset({messages.EXEC, messages.WRITE})


@dataclass(frozen=True)
class ProgressListener:
    """Hears a waiting call's progress notes, asked for every ``every_ms``."""

    every_ms: int
    heard: Callable[[ProgressNote], None]


class WorkerClient:
    def __init__(
        self,
        record: WorkerRecord,
        context: zmq.asyncio.Context,
        codec: WireCodec,
        on_exit: Callable[[WorkerClient], None],
        *,
        max_message: int = max_message_bytes(Limits()),
    ) -> None:
        self.record = record
        self._codec = codec
        self._on_exit = on_exit
        # A plain socket on the gateway's libzmq context, served on the loop by LoopSocket:
        # no future per send and receive (pyzmq's asyncio layer).
        socket = plain_socket(context, zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, max_message)
        socket.connect(record.request_endpoint)
        self._pending: dict[str, asyncio.Future[Envelope]] = {}
        self._listeners: dict[str, ProgressListener] = {}
        self._decoding: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.get_running_loop()
        self.alive = True
        self._wire = LoopSocket(socket, self._on_reply)
        self._pidfd: int | None = None
        self._watch_process()

    @property
    def worker_id(self) -> str:
        return self.record.worker_id

    @property
    def incarnation(self) -> int:
        return self.record.incarnation

    def _watch_process(self) -> None:
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None:
            return  # no pidfd: a failed ping or request timeout reveals the death instead
        try:
            self._pidfd = pidfd_open(self.record.pid)
        except OSError:
            self._loop.call_soon(self.mark_dead)
            return
        self._loop.add_reader(self._pidfd, self.mark_dead)

    @property
    def busy(self) -> bool:
        """A request of this gateway's is waiting for its reply."""
        return bool(self._pending)

    def mark_dead(self) -> None:
        if not self.alive:
            return
        self.alive = False
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        lost = ProtocolError(ErrorCode.WORKER_LOST, f"worker for {self.record.workdir} exited")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(lost)
        self._pending.clear()
        self._wire.close()
        self._on_exit(self)

    async def request(
        self,
        type: str,
        body: dict[str, Any],
        timeout: float | None = None,
        *,
        progress: ProgressListener | None = None,
    ) -> Any:
        """Send one request; return the reply body or raise the reply's ProtocolError.

        ``progress``, for an exec or write: asks the worker for a note that often while the
        call waits, and hears each. Cancelled while waiting (its client cancelled the tool
        call), an exec or write tells the worker to end the wait, leaving the output unread.
        """
        if not self.alive:
            raise ProtocolError(ErrorCode.WORKER_LOST, f"worker for {self.record.workdir} exited")
        if progress is not None:
            body = {**body, messages.PROGRESS_KEY: progress.every_ms}
        message = Envelope(type=type, body=body)
        future: asyncio.Future[Envelope] = self._loop.create_future()
        self._pending[message.id] = future
        if progress is not None:
            self._listeners[message.id] = progress
        try:
            try:
                await self._wire.send(self._codec.serialize(message))
            except zmq.ZMQError as exc:  # closed while waiting for room: the worker is gone
                raise ProtocolError(
                    ErrorCode.WORKER_LOST, f"worker for {self.record.workdir} exited"
                ) from exc
            reply = await (future if timeout is None else asyncio.wait_for(future, timeout))
        except asyncio.CancelledError:
            if type in WAITING_REQUESTS and self.alive:
                self._send_soon(Envelope(type=messages.CANCEL, body={"id": message.id}))
            raise
        finally:
            self._pending.pop(message.id, None)
            self._listeners.pop(message.id, None)
        if reply.type == messages.ERROR:
            raise ProtocolError.from_wire(reply.body)
        return reply.body

    def _on_reply(self, frames: list[bytes]) -> None:
        if sum(len(frame) for frame in frames) > OFF_LOOP_BYTES:
            task = self._loop.create_task(self._decode_off_loop(frames))
            self._decoding.add(task)
            task.add_done_callback(self._decoding.discard)
            return
        try:
            reply = self._codec.deserialize(frames)
        except ProtocolError:
            return  # unverifiable: cannot be trusted to resolve anything
        self._resolve(reply)

    async def _decode_off_loop(self, frames: list[bytes]) -> None:
        try:
            decoded = await asyncio.to_thread(self._codec.decode, frames)
            reply = self._codec.admit(decoded)  # the replay guard lives on the loop
        except ProtocolError:
            return
        self._resolve(reply)

    def _send_soon(self, message: Envelope) -> None:
        """Send without waiting: from a task being cancelled, which cannot await."""
        task = self._loop.create_task(self._wire.send(self._codec.serialize(message)))
        self._decoding.add(task)
        task.add_done_callback(self._decoding.discard)

    def _resolve(self, reply: Envelope) -> None:
        if reply.type == messages.PROGRESS:
            listener = self._listeners.get(reply.reply_to or "")
            if listener is not None:
                try:
                    note = ProgressNote.from_body(reply.body)
                except ProtocolError:
                    return  # a malformed note tells nothing; the reply still comes
                listener.heard(note)
            return
        future = self._pending.get(reply.reply_to or "")
        if future is not None and not future.done():
            future.set_result(reply)

    def close(self) -> None:
        if self.alive:
            self.alive = False
            if self._pidfd is not None:
                self._loop.remove_reader(self._pidfd)
                os.close(self._pidfd)
                self._pidfd = None
            with contextlib.suppress(zmq.ZMQError):
                self._wire.close()
