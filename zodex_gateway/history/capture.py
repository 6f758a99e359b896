"""Feeding history from the workers' event streams (output, process started/ended).

One SUB socket per worker. A worker's XPUB greets each new subscriber with ``welcome``;
:meth:`EventCapture.attach` waits for it, so the first command's events are never lost to
ZeroMQ's slow-joiner window. The sockets are read by one writer thread, not the event loop:
it waits on all of them at once, then verifies, decodes and stores what waits there, in
batches of whatever has queued meanwhile, up to ``BATCH_BYTES``: batches grow by themselves
under load, no timer is involved, and the loop is woken only to pass a stored batch to the
sink. (Reading them on the loop and handing the frames over cost a loop wakeup and a
thread hand-off per event.) The PTY side never waits for us — what the writer has not yet
read stays queued in ZeroMQ, a worker drops events for a subscriber that falls too far
behind — and a jump in a session's ``seq`` marks its capture incomplete.

The sockets belong to a ZeroMQ context of the capture's own, so that nothing on another
thread (the supervisor destroying its context at stop) closes them under the writer.

Secrets are redacted here, where output enters history, and the viewers' feed gets the
same redacted events (docs/security.md#redaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from zodex_gateway.history import HistoryStore, HistoryUnavailable
from zodex_gateway.history.records import ProcessEnd, ProcessStart
from zodex_gateway.redaction import SECRETS, OutputRedactor, SecretRegistry
from zodex_protocol import messages
from zodex_protocol.envelope import WireCodec
from zodex_protocol.errors import ProtocolError
from zodex_protocol.events import OutputEvent, ProcessEnded, ProcessStarted, WorkerEvent, decode_event
from zodex_protocol.layout import WorkerRecord

log = logging.getLogger("zodex.gateway")

WELCOME_TIMEOUT_S = 2.0
BATCH_BYTES = 256 * 1024
# Events left queued in ZeroMQ before it drops more (a worker's own queue holds as many
# again): a flood's events are 256 KiB each, so about 640 MiB.
EVENTS_QUEUED = 2_500
GAP_REASON = "output events were dropped: the history writer fell behind this command"
UNWRITABLE_REASON = "output events were not stored: history could not write"
# Process start/end events kept while history cannot write, stored once it can again (a
# process whose end is never stored looks running until the next start marks it lost).
MAX_HELD_EVENTS = 10_000


BatchSink = Callable[[list[WorkerEvent]], None]


@dataclass
class _Reader:
    socket: zmq.Socket[bytes]
    greeted: asyncio.Future[list[bytes]]  # set on the loop
    # The writer thread's: the first message is the greeting; a socket that failed is no
    # longer read (a poll would keep finding it ready).
    welcomed: bool = False
    failed: bool = False


class EventCapture:
    def __init__(
        self,
        store: HistoryStore,
        codec: WireCodec,
        sink: BatchSink | None = None,
        secrets: SecretRegistry = SECRETS,
        sink_idle: Callable[[], bool] | None = None,
    ) -> None:
        """``sink`` gets each batch of events on the loop once it is stored (the
        observer's feed), so what it reads back from history already includes them;
        ``sink_idle``, asked on the writer thread after each batch is stored, says when the
        sink would do nothing with it (nobody watches), and the loop is then not woken.
        The capture's sockets are its writer thread's, made by a ZeroMQ context of its own
        (one that another thread destroys must not close them under it)."""
        self._store = store
        self._sink_idle = sink_idle
        self._secrets = secrets
        self._streams: dict[str, OutputRedactor] = {}
        self._sink = sink
        self._codec = codec
        self._zmq: zmq.Context[zmq.Socket[bytes]] | None = None
        self._readers: dict[tuple[str, int], _Reader] = {}
        self._last_seq: dict[str, int] = {}
        # Sessions whose events history failed to store, to be marked incomplete once it
        # writes again; capture goes on (a full disk may be freed).
        self._unstored: set[str] = set()
        self._held: list[WorkerEvent] = []
        self._failing = False
        self._output_refused = False  # in the batch being written
        # Between the loop and the writer thread, guarded by _lock: sockets to read, the
        # stop, and stored batches for the sink (one wakeup of the loop passes on every
        # batch stored since the last). A byte on the pipe wakes the writer out of its poll
        # (a pipe rather than an eventfd: the gateway runs on macOS too).
        self._lock = threading.Lock()
        self._added: list[_Reader] = []
        self._closing = False
        self._signal = (-1, -1)  # read end, write end
        self._writer: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stored: list[list[WorkerEvent]] = []
        self._sink_due = False

    async def attach(self, record: WorkerRecord) -> None:
        key = (record.worker_id, record.incarnation)
        if key in self._readers or self._closing:
            return
        loop = self._loop = asyncio.get_running_loop()
        if self._writer is None:
            self._zmq = zmq.Context(io_threads=1)
            self._signal = os.pipe()
            for end in self._signal:
                os.set_blocking(end, False)
            self._writer = threading.Thread(target=self._write_loop, name="history-capture", daemon=True)
            self._writer.start()
        assert self._zmq is not None
        socket = self._zmq.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, EVENTS_QUEUED)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(record.event_endpoint)
        reader = self._readers[key] = _Reader(socket, loop.create_future())
        with self._lock:  # from here on the socket is the writer's alone
            self._added.append(reader)
        self._wake_writer()
        try:
            welcome = await asyncio.wait_for(asyncio.shield(reader.greeted), WELCOME_TIMEOUT_S)
            if welcome != [messages.WELCOME]:
                log.warning("worker %s greeted with %r", record.worker_id, welcome[:1])
        except TimeoutError:
            log.warning("no welcome from worker %s: its first events may be missing", record.worker_id)

    def _wake_writer(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes it already
            os.write(self._signal[1], b"\0")

    def _write_loop(self) -> None:
        """The writer thread: wait for events on every worker's socket, then read and store
        what waits there, a bounded batch at a time, in order. Reading only as fast as it
        stores, it leaves the rest queued in ZeroMQ, whose high-water marks then make a
        worker drop events for this subscriber (and the session's ``seq`` jumps)."""
        poller = zmq.Poller()
        wake = self._signal[0]
        poller.register(wake, zmq.POLLIN)
        readers: list[_Reader] = []
        turn = 0
        try:
            while True:
                ready = dict(poller.poll())
                if wake in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake, 4096)  # any left wake the poll again: harmless
                    with self._lock:
                        added, self._added = self._added, []
                        closing = self._closing
                    readers += added
                    for reader in added:
                        poller.register(reader.socket, zmq.POLLIN)
                    if closing:
                        return
                # Whoever is first is read first: with a batch bound, one busy worker then
                # cannot keep the others waiting.
                turn = (turn + 1) % max(1, len(readers))
                order = readers[turn:] + readers[:turn]
                batch = self._take([r for r in order if r.socket in ready])
                for reader in [r for r in readers if r.failed]:
                    poller.unregister(reader.socket)
                    readers.remove(reader)
                    reader.socket.close(linger=0)
                if batch:
                    self._store_batch(batch)
        finally:
            with self._lock:  # sockets handed over after the last look are closed too
                readers += self._added
                self._added = []
            for reader in readers:
                reader.socket.close(linger=0)

    def _take(self, ready: list[_Reader]) -> list[list[bytes]]:
        """What the ready sockets hold, up to about ``BATCH_BYTES``; the store's lock is held
        while a batch is written, and tool calls wait on that lock to record themselves."""
        batch: list[list[bytes]] = []
        size = 0
        for reader in ready:
            socket = reader.socket
            try:
                while size < BATCH_BYTES and int(socket.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                    frames = socket.recv_multipart(zmq.NOBLOCK)
                    if not reader.welcomed:
                        reader.welcomed = True  # the greeting is not an event
                        self._on_loop(_settle, reader.greeted, frames)
                        continue
                    batch.append(frames)
                    size += len(frames[-1])
            except zmq.ZMQError as exc:
                log.warning("history capture stopped reading a worker: %s", exc)
                reader.failed = True
        return batch

    def _on_loop(self, callback: Callable[..., None], *args: object) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(callback, *args)

    def _store_batch(self, batch: list[list[bytes]]) -> None:
        try:
            events = self._write(batch)
        except Exception:
            log.exception("history capture could not write a batch of events")
            return
        if self._sink is not None and self._loop is not None and not self._idle_sink():
            with self._lock:
                self._stored.append(events)
                wake, self._sink_due = not self._sink_due, True
            if wake:
                self._on_loop(self._pass_on)

    def _idle_sink(self) -> bool:
        return self._sink_idle is not None and self._sink_idle()

    def _pass_on(self) -> None:
        """Loop callback: give the sink every batch stored since the last call, in order."""
        with self._lock:
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
                known = self._secrets.snapshot()
                event = dataclasses.replace(event, cmd=known.text(event.cmd), cwd=known.text(event.cwd))
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
                start = ProcessStart(pid=event.pid, cmd=event.cmd, cwd=event.cwd, started_at=event.started_at)
                start["invocation_id"] = event.tag
                self._store.process_started(handle, **start)
            elif isinstance(event, ProcessEnded):
                if event.output_events != self._last_seq.pop(handle, 0):
                    self._store.mark_output_incomplete(handle, GAP_REASON)
                end = ProcessEnd(
                    exit_code=event.exit_code,
                    signal=event.signal,
                    reason=event.reason,
                    ended_at=event.ended_at,
                )
                self._store.process_ended(handle, **end)
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
        """Stop reading (what the writer already took is stored) and end the writer."""
        with self._lock:
            self._closing = True
        self._readers.clear()
        if self._writer is not None:
            self._wake_writer()
            await asyncio.to_thread(self._writer.join)
            self._writer = None
            for end in self._signal:
                os.close(end)
        if self._zmq is not None:
            self._zmq.term()  # the writer closed its sockets
            self._zmq = None


def _settle(future: asyncio.Future[list[bytes]], frames: list[bytes]) -> None:
    if not future.done():
        future.set_result(frames)
