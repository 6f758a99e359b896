"""Feeding history from the workers' event streams (output, process started/ended).

One SUB socket per worker. A worker's XPUB greets each new subscriber with ``welcome``;
:meth:`EventCapture.attach` waits for it, so the first command's events are never lost to
ZeroMQ's slow-joiner window. The reader takes everything already queued, then writes it in
one batch on a thread: batches grow by themselves under load, and no timer is involved.
The PTY side never waits for us — a worker drops events for a subscriber that falls too
far behind — and a jump in a session's ``seq`` marks its capture incomplete instead.

Secrets are redacted here, where output enters history, and the viewers' feed gets the
same redacted events (docs/security.md#redaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable

import zmq
import zmq.asyncio

from zodex_gateway.history import HistoryStore, HistoryUnavailable
from zodex_gateway.redaction import SECRETS, OutputRedactor, SecretRegistry
from zodex_protocol import messages
from zodex_protocol.envelope import WireCodec
from zodex_protocol.errors import ProtocolError
from zodex_protocol.events import OutputEvent, ProcessEnded, ProcessStarted, WorkerEvent, decode_event
from zodex_protocol.layout import WorkerRecord

log = logging.getLogger("zodex.gateway")

WELCOME_TIMEOUT_S = 2.0
BATCH_BYTES = 256 * 1024
GAP_REASON = "output events were dropped: the history writer fell behind this command"
UNWRITABLE_REASON = "output events were not stored: history could not write"
# Process start/end events kept while history cannot write, stored once it can again (a
# process whose end is never stored looks running until the next start marks it lost).
MAX_HELD_EVENTS = 10_000


BatchSink = Callable[[list[WorkerEvent]], None]


class EventCapture:
    def __init__(
        self,
        store: HistoryStore,
        context: zmq.asyncio.Context,
        codec: WireCodec,
        sink: BatchSink | None = None,
        secrets: SecretRegistry = SECRETS,
    ) -> None:
        """``sink`` gets each batch of events on the loop once it is stored (the
        observer's feed), so what it reads back from history already includes them."""
        self._store = store
        self._secrets = secrets
        self._streams: dict[str, OutputRedactor] = {}
        self._sink = sink
        self._context = context
        self._codec = codec
        self._readers: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._last_seq: dict[str, int] = {}
        # Sessions whose events history failed to store, to be marked incomplete once it
        # writes again; capture goes on (a full disk may be freed).
        self._unstored: set[str] = set()
        self._held: list[WorkerEvent] = []
        self._failing = False
        self._output_refused = False  # in the batch being written

    async def attach(self, record: WorkerRecord) -> None:
        key = (record.worker_id, record.incarnation)
        if key in self._readers:
            return
        socket = self._context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, 10_000)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(record.event_endpoint)
        try:
            welcome = await asyncio.wait_for(socket.recv_multipart(), WELCOME_TIMEOUT_S)
            if welcome != [messages.WELCOME]:
                log.warning("worker %s greeted with %r", record.worker_id, welcome[:1])
        except TimeoutError:
            log.warning("no welcome from worker %s: its first events may be missing", record.worker_id)
        self._readers[key] = asyncio.create_task(self._read(socket))

    async def _read(self, socket: zmq.asyncio.Socket) -> None:
        try:
            while True:
                batch = [await socket.recv_multipart()]
                size = len(batch[0][-1])
                # A bounded batch: the store's lock is held while it is written, and tool
                # calls wait on that lock to record themselves.
                while size < BATCH_BYTES:
                    try:
                        batch.append(await socket.recv_multipart(flags=zmq.NOBLOCK))
                    except zmq.Again:
                        break
                    size += len(batch[-1][-1])
                # Verifying and decoding happen on the thread too: HMAC over large frames
                # releases the GIL, so this work can use the other core.
                events = await asyncio.to_thread(self._write, batch)
                if self._sink is not None:
                    self._sink(events)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("history capture stopped")
        finally:
            socket.close(linger=0)

    def _decode(self, frames: list[bytes]) -> WorkerEvent | None:
        if len(frames) != 3:
            return None  # the welcome, or something that is not an event
        try:
            envelope = self._codec.deserialize(frames[1:])
            return decode_event(envelope.type, envelope.body)
        except ProtocolError as exc:
            log.warning("unverifiable or malformed event dropped: %s", exc)
            return None

    def _write(self, batch: list[list[bytes]]) -> list[WorkerEvent]:
        """Verify, decode and store a batch in arrival order; runs on a thread (the store is
        thread-safe). Returns the events, stored or not: viewers still see them."""
        events = self._redacted([e for e in map(self._decode, batch) if e is not None])
        try:
            for handle in sorted(self._unstored):
                self._store.mark_output_incomplete(handle, UNWRITABLE_REASON)
                self._unstored.discard(handle)
            if self._held:
                self._store_events(self._held)  # upserts: storing one twice is harmless
                self._held = []
            self._store_events(events)
        except HistoryUnavailable as exc:
            if not self._failing:
                log.warning("history capture could not store command events: %s", exc.cause)
                self._failing = True
            self._unstored.update(e.session for e in events)
            lifecycle = [e for e in events if not isinstance(e, OutputEvent)]
            self._held = (self._held + lifecycle)[-MAX_HELD_EVENTS:]
            return events
        if self._failing and not self._output_refused:
            log.warning("history capture stores command events again")
            self._failing = False
        self._output_refused = False
        return events

    def _redacted(self, events: list[WorkerEvent]) -> list[WorkerEvent]:
        """The events as history and viewers may see them. Output is redacted as a stream
        per session, so a secret split between two events is caught; what it held back
        comes out as one more output event (``seq`` None) just before the process ends."""
        shown: list[WorkerEvent] = []
        for event in events:
            handle = event.session
            if isinstance(event, OutputEvent):
                stream = self._streams.get(handle)
                if stream is None:
                    stream = self._streams[handle] = self._secrets.output_stream()
                event = dataclasses.replace(event, text=stream.feed(event.text))
            elif isinstance(event, ProcessStarted):
                event = dataclasses.replace(event, cmd=self._secrets.redact(event.cmd))
            else:
                ending = self._streams.pop(handle, None)
                rest = ending.finish() if ending is not None else ""
                if rest:
                    shown.append(OutputEvent(session=handle, seq=None, text=rest))
            shown.append(event)
        return shown

    def _store_events(self, events: list[WorkerEvent]) -> None:
        output: list[tuple[str, str]] = []
        for event in events:
            handle = event.session
            if isinstance(event, OutputEvent):
                if event.seq is not None:  # None: the redactor's held-back end
                    self._check_seq(handle, event.seq)
                output.append((handle, event.text))
                continue
            if output:
                self._append_output(output)
                output = []
            if isinstance(event, ProcessStarted):
                self._store.process_started(
                    handle,
                    pid=event.pid,
                    cmd=event.cmd,
                    cwd=event.cwd,
                    started_at=event.started_at,
                    invocation_id=event.tag,
                )
            elif isinstance(event, ProcessEnded):
                if event.output_events != self._last_seq.pop(handle, 0):
                    self._store.mark_output_incomplete(handle, GAP_REASON)
                self._store.process_ended(
                    handle,
                    exit_code=event.exit_code,
                    signal=event.signal,
                    reason=event.reason,
                    ended_at=event.ended_at,
                )
        if output:
            self._append_output(output)

    def _append_output(self, output: list[tuple[str, str]]) -> None:
        """Output history cannot store (a full disk) is marked missing later; the starts
        and ends after it in the batch are still recorded, so no process row is left
        running (docs/history.md#recording)."""
        try:
            self._store.append_output(output)
        except HistoryUnavailable as exc:
            if not self._failing:
                log.warning("history capture could not store command output: %s", exc.cause)
                self._failing = True
            self._output_refused = True
            self._unstored.update(handle for handle, _ in output)

    def _check_seq(self, handle: str, seq: int) -> None:
        expected = self._last_seq.get(handle, 0) + 1
        self._last_seq[handle] = seq
        if seq != expected:
            self._store.mark_output_incomplete(handle, GAP_REASON)

    async def close(self) -> None:
        for task in self._readers.values():
            task.cancel()
        for task in self._readers.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._readers.clear()
