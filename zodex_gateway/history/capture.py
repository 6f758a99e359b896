"""Feeding history from the workers' event streams (output, process started/ended).

One SUB socket per worker. A worker's XPUB greets each new subscriber with ``welcome``;
:meth:`EventCapture.attach` waits for it, so the first command's events are never lost to
ZeroMQ's slow-joiner window. The loop only takes frames off the sockets (one callback per
wakeup of a socket's descriptor, everything queued taken at once: no future or task per
event) and hands them to one writer thread, which verifies, decodes and stores them in
batches of whatever has queued meanwhile, up to ``BATCH_BYTES``: batches grow by
themselves under load, no timer is involved, and the loop is woken again only to pass a
stored batch to the sink. The PTY side never waits for us — reading stops while
``MAX_QUEUED_BYTES`` wait for the writer, then a worker drops events for a subscriber that
falls too far behind — and a jump in a session's ``seq`` marks its capture incomplete.

Secrets are redacted here, where output enters history, and the viewers' feed gets the
same redacted events (docs/security.md#redaction).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import zmq
import zmq.asyncio

from zodex_gateway.history import HistoryStore, HistoryUnavailable
from zodex_gateway.redaction import SECRETS, OutputRedactor, SecretRegistry
from zodex_protocol import messages
from zodex_protocol.envelope import WireCodec
from zodex_protocol.errors import ProtocolError
from zodex_protocol.events import OutputEvent, ProcessEnded, ProcessStarted, WorkerEvent, decode_event
from zodex_protocol.layout import WorkerRecord
from zodex_protocol.loop_socket import plain_socket

log = logging.getLogger("zodex.gateway")

WELCOME_TIMEOUT_S = 2.0
BATCH_BYTES = 256 * 1024
# Frames waiting for the writer before the loop stops reading (the workers' sockets then
# queue up to their high-water marks, and drop beyond them).
MAX_QUEUED_BYTES = 4 * BATCH_BYTES
MAX_QUEUED_EVENTS = 10_000
DRAIN_PER_CALLBACK = 1_000  # frames taken per wakeup before the loop gets a turn
GAP_REASON = "output events were dropped: the history writer fell behind this command"
UNWRITABLE_REASON = "output events were not stored: history could not write"
# Process start/end events kept while history cannot write, stored once it can again (a
# process whose end is never stored looks running until the next start marks it lost).
MAX_HELD_EVENTS = 10_000


BatchSink = Callable[[list[WorkerEvent]], None]


@dataclass
class _Reader:
    socket: zmq.Socket[bytes]
    fd: int
    greeted: asyncio.Future[list[bytes]]


class EventCapture:
    def __init__(
        self,
        store: HistoryStore,
        context: zmq.asyncio.Context,
        codec: WireCodec,
        sink: BatchSink | None = None,
        secrets: SecretRegistry = SECRETS,
        sink_idle: Callable[[], bool] | None = None,
    ) -> None:
        """``sink`` gets each batch of events on the loop once it is stored (the
        observer's feed), so what it reads back from history already includes them;
        ``sink_idle``, asked on the writer thread after each batch is stored, says when the
        sink would do nothing with it (nobody watches), and the loop is then not woken."""
        self._store = store
        self._sink_idle = sink_idle
        self._secrets = secrets
        self._streams: dict[str, OutputRedactor] = {}
        self._sink = sink
        self._context = context  # its sockets here are plain ones, read from loop callbacks
        self._codec = codec
        self._readers: dict[tuple[str, int], _Reader] = {}
        self._last_seq: dict[str, int] = {}
        # Sessions whose events history failed to store, to be marked incomplete once it
        # writes again; capture goes on (a full disk may be freed).
        self._unstored: set[str] = set()
        self._held: list[WorkerEvent] = []
        self._failing = False
        self._output_refused = False  # in the batch being written
        # Frames between the loop and the writer thread, guarded by _wake.
        self._queue: collections.deque[list[bytes]] = collections.deque()
        self._queued_bytes = 0
        self._wake = threading.Condition()
        self._closing = False
        self._paused = False  # reading stopped until the writer catches up
        self._writer: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Stored batches for the sink, guarded by _wake: one wakeup of the loop passes on
        # every batch stored since the last.
        self._stored: list[list[WorkerEvent]] = []
        self._sink_due = False

    async def attach(self, record: WorkerRecord) -> None:
        key = (record.worker_id, record.incarnation)
        if key in self._readers:
            return
        loop = self._loop = asyncio.get_running_loop()
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="history-capture", daemon=True)
            self._writer.start()
        socket = plain_socket(self._context, zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, 10_000)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(record.event_endpoint)
        reader = self._readers[key] = _Reader(socket, int(socket.getsockopt(zmq.FD)), loop.create_future())
        if not self._paused:
            loop.add_reader(reader.fd, self._take, reader)
            self._take(reader)  # the descriptor signals edges: look once now
        try:
            welcome = await asyncio.wait_for(asyncio.shield(reader.greeted), WELCOME_TIMEOUT_S)
            if welcome != [messages.WELCOME]:
                log.warning("worker %s greeted with %r", record.worker_id, welcome[:1])
        except TimeoutError:
            log.warning("no welcome from worker %s: its first events may be missing", record.worker_id)

    def _take(self, reader: _Reader) -> None:
        """Loop callback: move what the socket holds to the writer's queue."""
        if self._paused or reader.socket.closed:
            return
        taken: list[list[bytes]] = []
        size = 0
        socket = reader.socket
        try:
            while len(taken) < DRAIN_PER_CALLBACK and int(socket.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                frames = socket.recv_multipart(zmq.NOBLOCK)
                if not reader.greeted.done():
                    reader.greeted.set_result(frames)  # the greeting is not an event
                    continue
                taken.append(frames)
                size += len(frames[-1])
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            log.warning("history capture stopped reading a worker: %s", exc)
            return
        if len(taken) == DRAIN_PER_CALLBACK and self._loop is not None:
            self._loop.call_soon(self._take, reader)  # more may wait; no edge will say so
        if not taken:
            return
        with self._wake:
            self._queue.extend(taken)
            self._queued_bytes += size
            full = self._queued_bytes > MAX_QUEUED_BYTES or len(self._queue) > MAX_QUEUED_EVENTS
            if full:
                self._paused = True
            self._wake.notify()
        if full and self._loop is not None:
            for other in self._readers.values():
                self._loop.remove_reader(other.fd)

    def _resume(self) -> None:
        """Loop callback from the writer: it has caught up, read again."""
        with self._wake:
            self._paused = False
        if self._loop is None or self._closing:
            return
        for reader in list(self._readers.values()):
            self._loop.add_reader(reader.fd, self._take, reader)
            self._take(reader)

    def _write_loop(self) -> None:
        """The writer thread: store what queued up, a bounded batch at a time, in order."""
        while True:
            with self._wake:
                while not self._queue and not self._closing:
                    self._wake.wait()
                if not self._queue:
                    return
                batch = [self._queue.popleft()]
                size = len(batch[0][-1])
                # A bounded batch: the store's lock is held while it is written, and tool
                # calls wait on that lock to record themselves.
                while self._queue and size < BATCH_BYTES:
                    batch.append(self._queue.popleft())
                    size += len(batch[-1][-1])
                self._queued_bytes -= size
                resume = self._paused and self._queued_bytes <= MAX_QUEUED_BYTES // 2
            loop = self._loop
            if resume and loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closing
                    loop.call_soon_threadsafe(self._resume)
            try:
                events = self._write(batch)
            except Exception:
                log.exception("history capture could not write a batch of events")
                continue
            if self._sink is not None and loop is not None and not self._idle_sink():
                with self._wake:
                    self._stored.append(events)
                    wake, self._sink_due = not self._sink_due, True
                if wake:
                    with contextlib.suppress(RuntimeError):  # the loop is closing
                        loop.call_soon_threadsafe(self._pass_on)

    def _idle_sink(self) -> bool:
        return self._sink_idle is not None and self._sink_idle()

    def _pass_on(self) -> None:
        """Loop callback: give the sink every batch stored since the last call, in order."""
        with self._wake:
            batches, self._stored, self._sink_due = self._stored, [], False
        assert self._sink is not None
        for events in batches:
            self._sink(events)

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
        """Verify, decode and store a batch in arrival order; runs on the writer thread (the
        store is thread-safe; HMAC over large frames releases the GIL, so this work can use
        the other core). Returns the events, stored or not: viewers still see them."""
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
        """Stop reading, then let the writer store what it was given and end."""
        for reader in self._readers.values():
            if self._loop is not None:
                self._loop.remove_reader(reader.fd)
            reader.socket.close(linger=0)
        self._readers.clear()
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._writer is not None:
            await asyncio.to_thread(self._writer.join)
            self._writer = None
