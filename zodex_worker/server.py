"""The worker's ZeroMQ face: a ROUTER for requests, a PUB for events.

One named handler per request type, registered in an explicit table. Every request gets
exactly one reply — the handler's, or a typed ``error`` — and requests run concurrently,
so a long poll never holds up a ping or a call on another session. The exceptions are the
waiting requests (``exec``, ``write``): a ``cancel`` from the same gateway ends one's wait
and it is not answered, and one that asked for ``progress`` gets those notes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import zmq

from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.events import WorkerEvent
from zodex_protocol.loop_socket import LoopSocket
from zodex_protocol.progress import ProgressNote
from zodex_protocol.requests import ExecRequest, PatchRequest, WriteRequest
from zodex_worker.call_waits import CallWait, WaitCancelled
from zodex_worker.person_input import person_handlers
from zodex_worker.service import WorkerService

# The model's calls (not a gateway's ping or a viewer's request).
TOOL_TYPES = frozenset({messages.EXEC, messages.WRITE, messages.PATCH})

log = logging.getLogger("zodex.worker")

Handler = Callable[[dict[str, Any]], Awaitable[tuple[str, Any]]]
WaitingHandler = Callable[[dict[str, Any], CallWait], Awaitable[tuple[str, Any]]]


class EventPublisher:
    """Signs and publishes events on an XPUB; never blocks (a slow subscriber loses, the PTY
    never waits), and costs nothing while nobody subscribes."""

    def __init__(self, socket: zmq.Socket[bytes], codec: WireCodec) -> None:
        self._socket = socket
        self._codec = codec
        self._topics: set[bytes] = set()

    def read_subscriptions(self) -> None:
        """Take in (un)subscribe messages. A non-verbose XPUB passes on only the first
        subscription to a topic and its last unsubscription (also sent for a subscriber
        that disconnects), so the set of topics is exact."""
        while int(self._socket.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            message = self._socket.recv(zmq.NOBLOCK)
            if message[:1] == b"\x01":
                self._topics.add(message[1:])
            elif message[:1] == b"\x00":
                self._topics.discard(message[1:])

    def __call__(self, event: WorkerEvent) -> None:
        if not self._topics:
            return
        frames = self._codec.serialize(Envelope(type=event.TYPE, body=event.to_body()))
        try:
            self._socket.send_multipart([event.TYPE.encode(), *frames], flags=zmq.NOBLOCK)
        except zmq.Again:
            pass
        # Sending can take in a pending (un)subscription without the edge-triggered fd
        # firing again: look for one now.
        self.read_subscriptions()


class WorkerServer:
    def __init__(
        self,
        service: WorkerService,
        router: zmq.Socket[bytes],
        codec: WireCodec,
        on_first_answer: Callable[[], None] | None = None,
    ) -> None:
        """``router`` is a plain socket: it is served on the loop through :class:`LoopSocket`.
        ``on_first_answer`` is called once the answer to the first tool call has been sent."""
        self.service = service
        self._on_first_answer = on_first_answer
        self._router = router
        self._wire: LoopSocket | None = None
        self._codec = codec
        self._tasks: set[asyncio.Task[None]] = set()
        self.shutdown_requested = asyncio.Event()
        self._tool_requests = 0  # exec, write and patch requests being answered
        self._handlers: dict[str, Handler] = {
            messages.PING: self._on_ping,
            messages.PATCH: self._on_patch,
            messages.SHUTDOWN: self._on_shutdown,
            messages.RETIRE: self._on_retire,
            **person_handlers(service.person, service.limits),  # a person's, from a viewer
        }
        self._waiting_handlers: dict[str, WaitingHandler] = {
            messages.EXEC: self._on_exec,
            messages.WRITE: self._on_write,
        }
        # The waits in progress, by the asking gateway's identity and the request's id.
        self._waits: dict[tuple[bytes, str], CallWait] = {}

    async def serve(self) -> None:
        """Answer requests until cancelled; the router's owner closes it afterwards."""
        self._wire = LoopSocket(self._router, self._on_request)
        try:
            await asyncio.get_running_loop().create_future()  # requests come through callbacks
        finally:
            self._wire.stop_reading()

    def _on_request(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            return  # not even a routing identity: nobody to answer
        identity, payload = frames[0], frames[1:]
        task = asyncio.create_task(self._answer(identity, payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, identity: bytes, payload: list[bytes]) -> None:
        try:
            request = self._codec.deserialize(payload)
        except ProtocolError as exc:
            reply_to = self._codec.peek_id(payload)
            await self._send(identity, Envelope(type=messages.ERROR, body=exc.to_wire(), reply_to=reply_to))
            return
        if request.type == messages.CANCEL:
            self._cancel(identity, request.body)
            return
        key = (identity, request.id)
        try:
            body = request.body if isinstance(request.body, dict) else None
            if body is None:
                raise ProtocolError(ErrorCode.BAD_REQUEST, f"{request.type} needs a map body")
            waiting = self._waiting_handlers.get(request.type)
            if waiting is not None:
                call = self._waits[key] = self._call_wait(identity, request, body)
                reply_type, reply_body = await waiting(body, call)
            else:
                handler = self._handlers.get(request.type)
                if handler is None:
                    raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type: {request.type}")
                reply_type, reply_body = await handler(body)
            reply = request.reply(reply_type, reply_body)
        except WaitCancelled:
            return  # its gateway stopped listening: nothing to answer
        except ProtocolError as exc:
            reply = request.reply(messages.ERROR, exc.to_wire())
        except Exception as exc:
            log.exception("handler for %s failed", request.type)
            reply = request.reply(
                messages.ERROR, ProtocolError(ErrorCode.INTERNAL, f"worker error: {exc}").to_wire()
            )
        finally:
            self._waits.pop(key, None)
        await self._send(identity, reply)
        if self._on_first_answer is not None and request.type in TOOL_TYPES:
            answered, self._on_first_answer = self._on_first_answer, None
            answered()

    def _call_wait(self, identity: bytes, request: Envelope, body: dict[str, Any]) -> CallWait:
        every = body.get(messages.PROGRESS_KEY)
        if not isinstance(every, int) or isinstance(every, bool) or every <= 0:
            return CallWait()

        def report(note: ProgressNote) -> None:
            task = asyncio.create_task(self._send(identity, request.reply(messages.PROGRESS, note.to_body())))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return CallWait(progress_ms=every, report=report)

    def _cancel(self, identity: bytes, body: object) -> None:
        """A gateway can end only its own waits: the id is looked up under its identity."""
        target = body.get("id") if isinstance(body, dict) else None
        call = self._waits.get((identity, target)) if isinstance(target, str) else None
        if call is not None:
            call.cancel()

    async def _send(self, identity: bytes, reply: Envelope) -> None:
        assert self._wire is not None
        # A ROUTER never waits to send: a reply to a gateway that is gone is dropped.
        await self._wire.send([identity, *self._codec.serialize(reply)])

    async def _on_ping(self, _body: dict[str, Any]) -> tuple[str, Any]:
        return messages.PONG, self.service.ping().to_body()

    async def _on_exec(self, body: dict[str, Any], call: CallWait) -> tuple[str, Any]:
        request = ExecRequest.from_body(body, self.service.limits)
        with self._tool_request():
            return messages.RESULT, (await self.service.exec(request, call)).to_body()

    async def _on_write(self, body: dict[str, Any], call: CallWait) -> tuple[str, Any]:
        request = WriteRequest.from_body(body, self.service.limits)
        with self._tool_request():
            return messages.RESULT, (await self.service.write(request, call)).to_body()

    async def _on_patch(self, body: dict[str, Any]) -> tuple[str, Any]:
        request = PatchRequest.from_body(body, self.service.limits)
        with self._tool_request():
            return messages.PATCHED, (await self.service.patch(request)).to_body()

    @contextlib.contextmanager
    def _tool_request(self) -> Iterator[None]:
        self._tool_requests += 1
        try:
            yield
        finally:
            self._tool_requests -= 1

    async def _on_retire(self, _body: dict[str, Any]) -> tuple[str, Any]:
        """Stop as ``shutdown`` does, but only when idle (docs/sessions.md#idle-workers). The
        check and the start of the stop run with no await between them: no request this
        loop takes after the check finds the worker still accepting work."""
        service = self.service
        idle = (
            not service.stopping
            and self._tool_requests == 0
            and service.table.running_count() == 0
            and not service.table.jobs_left_behind()
        )
        if not idle:
            return messages.RETIRED, {"stopping": False}
        await service.shutdown()  # sets stopping before its first await
        self.shutdown_requested.set()
        return messages.RETIRED, {"stopping": True}

    async def _on_shutdown(self, _body: dict[str, Any]) -> tuple[str, Any]:
        await self.service.shutdown()
        self.shutdown_requested.set()
        return messages.BYE, {}
