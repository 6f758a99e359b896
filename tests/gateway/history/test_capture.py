"""The event capture that feeds history from a worker's event stream (docs/history.md#recording):
events stored in order and passed on only once stored, events that queued up written in few
bounded batches, a jump in a session's ``seq`` (or fewer output events than the end says)
marking its output incomplete, and an event that does not verify dropped.

The worker is a stand-in here, an XPUB that greets subscribers as a worker's does, so the
test chooses exactly which events arrive, in which order, and when."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

from tests.support.gateway import wait_for
from zodex_gateway.history import HistoryStore
from zodex_gateway.history.capture import BATCH_BYTES, GAP_REASON, EventCapture
from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec
from zodex_protocol.layout import WorkerRecord
from zodex_protocol.version import PROTOCOL_VERSION

pytestmark = pytest.mark.timeout(30)

KEY = b"k" * 32
HANDLE = "abcdefg1-0123456789"


class StandInWorker:
    """A worker's event side only: signed events on an XPUB that sends ``welcome`` to each
    subscriber and hands the test every subscription (verbose), so a test publishes only
    once the subscribers it needs are live."""

    def __init__(self, root: Path) -> None:
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.pub.setsockopt(zmq.XPUB_WELCOME_MSG, messages.WELCOME)
        self.pub.setsockopt(zmq.SNDHWM, 0)  # the test's bursts must not be dropped here
        endpoint = f"ipc://{root / 'pub'}"
        self.pub.bind(endpoint)
        self.codec = WireCodec(KEY)
        self.record = WorkerRecord(
            "abcdefg", 1, os.getpid(), None, str(root), f"ipc://{root / 'req'}", endpoint, PROTOCOL_VERSION
        )

    def subscribed(self) -> None:
        """Wait for one more subscription to reach the XPUB."""
        assert self.pub.poll(10_000), "no subscription arrived"
        assert self.pub.recv()[:1] == b"\x01"

    def publish(self, type: str, body: dict[str, Any], codec: WireCodec | None = None) -> None:
        frames = (codec or self.codec).serialize(Envelope(type=type, body=body))
        self.pub.send_multipart([type.encode(), *frames])

    def started(self, handle: str = HANDLE) -> None:
        self.publish(
            messages.EVENT_PROCESS_STARTED,
            {"session": handle, "pid": 4242, "cmd": "make", "cwd": "/w", "started_at": 1.0, "tag": None},
        )

    def output(self, seq: int, text: str, handle: str = HANDLE, codec: WireCodec | None = None) -> None:
        self.publish(messages.EVENT_OUTPUT, {"session": handle, "seq": seq, "text": text}, codec)

    def ended(self, output_events: int, handle: str = HANDLE) -> None:
        self.publish(
            messages.EVENT_PROCESS_ENDED,
            {
                "session": handle,
                "exit_code": 0,
                "signal": None,
                "reason": "exit",
                "ended_at": 2.0,
                "background": 0,
                "output_events": output_events,
            },
        )

    def close(self) -> None:
        self.context.destroy(linger=0)  # the XPUB and any subscriber a test left open


@pytest.fixture
def worker() -> Iterator[StandInWorker]:
    root = Path(tempfile.mkdtemp(prefix="zx", dir="/tmp"))  # short: ipc paths are limited
    stand_in = StandInWorker(root)
    try:
        yield stand_in
    finally:
        stand_in.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def capture(store: HistoryStore, worker: StandInWorker) -> AsyncIterator[Captured]:
    async with capturing(store, worker) as captured:
        yield captured


def text_of(event: Any) -> str:
    """An output event's text, whether the sink is given envelopes or decoded events."""
    body = getattr(event, "body", None)
    text = body.get("text") if isinstance(body, dict) else getattr(event, "text", None)
    return text if isinstance(text, str) else ""


class Captured:
    """The capture under test, with a sink that checks, for each batch it is given, that
    history already holds that batch's output."""

    def __init__(self, store: HistoryStore, sink_idle: Callable[[], bool] | None = None) -> None:
        self.store = store
        self.capture = EventCapture(store, WireCodec(KEY), sink=self.sink, sink_idle=sink_idle)
        self.events_seen = 0
        self.shown = ""
        self.stored_before_shown: list[bool] = []

    def sink(self, events: list[Any]) -> None:
        self.events_seen += len(events)
        self.shown += "".join(map(text_of, events))
        # History may hold more by now (the writer goes on while the loop runs the sink),
        # never less.
        self.stored_before_shown.append(self.store.output(HANDLE)[0].startswith(self.shown))


@asynccontextmanager
async def capturing(
    store: HistoryStore, worker: StandInWorker, sink_idle: Callable[[], bool] | None = None
) -> AsyncIterator[Captured]:
    captured = Captured(store, sink_idle)
    try:
        # The XPUB greets (and takes in the subscription) only while it is used: a thread
        # uses it while attach waits for the greeting, as a worker's event loop would.
        await asyncio.gather(captured.capture.attach(worker.record), asyncio.to_thread(worker.subscribed))
        yield captured
    finally:
        await captured.capture.close()


def process(store: HistoryStore, handle: str = HANDLE) -> dict[str, Any]:
    found = store.process(handle)
    assert found is not None
    return found


async def ended(store: HistoryStore, handle: str = HANDLE) -> dict[str, Any]:
    await wait_for(
        lambda: (store.process(handle) or {}).get("ended_at") is not None, what="the end to be stored"
    )
    return process(store, handle)


async def test_events_are_stored_in_order_before_viewers_get_them(
    capture: Captured, worker: StandInWorker, store: HistoryStore
) -> None:
    worker.started()
    worker.output(1, "hello ")
    worker.output(2, "world\n")
    worker.ended(output_events=2)
    stored = await ended(store)
    assert (stored["cmd"], stored["pid"], stored["exit_code"], stored["reason"]) == ("make", 4242, 0, "exit")
    assert store.output(HANDLE) == ("hello world\n", True)
    assert stored["output_complete"] is True and stored["output_incomplete_reason"] is None
    await wait_for(lambda: capture.events_seen == 4, what="the sink to get every event")
    assert capture.shown == "hello world\n"
    assert capture.stored_before_shown and all(capture.stored_before_shown)


async def test_batches_stored_while_the_sink_is_idle_are_not_passed_on(
    worker: StandInWorker, store: HistoryStore
) -> None:
    """While the sink says it would do nothing (nobody watches), a stored batch does not
    wake the loop for it; history still stores every byte, and what is stored once the sink
    listens again reaches it."""
    idle = True
    async with capturing(store, worker, sink_idle=lambda: idle) as captured:
        worker.started()
        worker.output(1, "unwatched ")
        await wait_for(lambda: store.output(HANDLE)[0] == "unwatched ", what="the first output to be stored")
        idle = False
        worker.output(2, "watched\n")
        worker.ended(output_events=2)
        stored = await ended(store)
        await wait_for(lambda: captured.shown == "watched\n", what="the sink to get the later output")
        await wait_for(lambda: captured.events_seen == 2, what="the sink to get the end")
    assert store.output(HANDLE) == ("unwatched watched\n", True) and stored["output_complete"] is True
    assert captured.shown == "watched\n", "what was stored while idle never reached the sink"


@pytest.mark.parametrize(
    ("seqs", "output_events"),
    [
        pytest.param([1, 3], 3, id="a seq skipped"),
        pytest.param([2, 3], 3, id="the first missing"),
        pytest.param([1, 2], 3, id="the last missing"),
        pytest.param([1, 1], 2, id="a seq repeated"),
    ],
)
async def test_a_seq_gap_marks_the_output_incomplete(
    capture: Captured, worker: StandInWorker, store: HistoryStore, seqs: list[int], output_events: int
) -> None:
    worker.started()
    for seq in seqs:
        worker.output(seq, f"part {seq}\n")
    worker.ended(output_events=output_events)
    stored = await ended(store)
    assert (stored["output_complete"], stored["output_incomplete_reason"]) == (False, GAP_REASON)
    assert store.output(HANDLE) == ("".join(f"part {seq}\n" for seq in seqs), False)


async def test_one_session_gap_leaves_another_complete(
    capture: Captured, worker: StandInWorker, store: HistoryStore
) -> None:
    other = "abcdefg1-9876543210"
    worker.started()
    worker.started(other)
    worker.output(1, "a", other)
    worker.output(1, "a")
    worker.output(3, "c")  # HANDLE lost its 2
    worker.output(2, "b", other)
    worker.ended(output_events=3)
    worker.ended(output_events=2, handle=other)
    await ended(store, other)
    assert process(store)["output_complete"] is False
    assert process(store, other)["output_complete"] is True
    assert store.output(other) == ("ab", True)


async def test_an_event_that_does_not_verify_is_dropped(
    capture: Captured, worker: StandInWorker, store: HistoryStore
) -> None:
    worker.started()
    worker.output(1, "a")
    worker.output(2, "forged", codec=WireCodec(b"x" * 32))
    worker.output(2, "b")
    worker.ended(output_events=2)
    stored = await ended(store)
    assert store.output(HANDLE) == ("ab", True)
    assert stored["output_complete"] is True


@contextmanager
def writes_held(capture: EventCapture) -> Iterator[tuple[list[list[int]], threading.Event]]:
    """Record each batch the capture writes (the sizes of its events' last frames) and hold
    the first write until the returned event is set: meanwhile events queue up."""
    batches: list[list[int]] = []
    release = threading.Event()
    write = capture._write

    def held(batch: list[list[bytes]]) -> Any:
        batches.append([len(frames[-1]) for frames in batch])
        if len(batches) == 1:
            assert release.wait(20), "the first write was never released"
        return write(batch)

    capture._write = held  # type: ignore[method-assign]
    try:
        yield batches, release
    finally:
        release.set()


def second_subscriber(worker: StandInWorker) -> zmq.Socket[bytes]:
    """Once this one has received a burst, the capture's own subscription (earlier, on the
    same XPUB) has it queued too."""
    sub = worker.context.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(worker.record.event_endpoint)
    try:
        worker.subscribed()  # the XPUB takes in the new pipe only when it is used
        assert sub.poll(10_000) and sub.recv_multipart() == [messages.WELCOME]
    except BaseException:
        sub.close(linger=0)
        raise
    return sub


def drain(sub: zmq.Socket[bytes], count: int) -> None:
    for _ in range(count):
        assert sub.poll(10_000), "the second subscriber missed events"
        sub.recv_multipart()


async def test_events_that_queue_up_are_written_together(
    capture: Captured, worker: StandInWorker, store: HistoryStore
) -> None:
    lines = [f"line {n}\n" for n in range(1, 201)]
    sub = second_subscriber(worker)
    try:
        with writes_held(capture.capture) as (batches, release):
            worker.started()
            await wait_for(lambda: len(batches) == 1, what="the first write to begin")
            for seq, line in enumerate(lines, 1):
                worker.output(seq, line)
            worker.ended(output_events=len(lines))
            drain(sub, len(lines) + 2)
            release.set()
            stored = await ended(store)
    finally:
        sub.close(linger=0)
    assert store.output(HANDLE) == ("".join(lines), True) and stored["output_complete"] is True
    assert len(batches[0]) == 1, "the start was written alone, before the burst"
    # 201 events were waiting: a write each would be 201 more.
    assert len(batches) <= 3, [len(batch) for batch in batches]


async def test_a_batch_stops_growing_at_its_byte_bound(
    capture: Captured, worker: StandInWorker, store: HistoryStore
) -> None:
    piece = "x" * (100 * 1024)
    count = 8
    sub = second_subscriber(worker)
    try:
        with writes_held(capture.capture) as (batches, release):
            worker.started()
            await wait_for(lambda: len(batches) == 1, what="the first write to begin")
            for seq in range(1, count + 1):
                worker.output(seq, piece)
            worker.ended(output_events=count)
            drain(sub, count + 2)
            release.set()
            await ended(store)
    finally:
        sub.close(linger=0)
    assert store.output(HANDLE) == (piece * count, True)
    # A batch takes events until it holds BATCH_BYTES: at most one event beyond the bound.
    largest_event = max(size for batch in batches for size in batch)
    for batch in batches:
        assert sum(batch[:-1]) < BATCH_BYTES and sum(batch) < BATCH_BYTES + largest_event
    assert len(batches) >= 1 + (count * len(piece)) // (BATCH_BYTES + largest_event)


async def test_each_worker_is_read_and_closing_ends_the_writer(store: HistoryStore) -> None:
    """One writer thread reads every worker's socket; closing the capture ends that thread
    and closes its sockets (its own ZeroMQ context terminates, which waits for them)."""
    roots = [Path(tempfile.mkdtemp(prefix="zx", dir="/tmp")) for _ in range(2)]
    workers = [StandInWorker(root) for root in roots]
    workers[1].record = dataclasses.replace(workers[1].record, worker_id="hijklmn")
    handles = ["abcdefg1-0123456789", "hijklmn1-0123456789"]
    capture = EventCapture(store, WireCodec(KEY))
    try:
        for worker in workers:
            await asyncio.gather(capture.attach(worker.record), asyncio.to_thread(worker.subscribed))
        for worker, handle in zip(workers, handles, strict=True):
            worker.started(handle)
            worker.output(1, f"from {handle}\n", handle)
            worker.ended(output_events=1, handle=handle)
        for handle in handles:
            await ended(store, handle)
            assert store.output(handle) == (f"from {handle}\n", True)
        assert [t.name for t in threading.enumerate()].count("history-capture") == 1
    finally:
        await capture.close()
        for worker, root in zip(workers, roots, strict=True):
            worker.close()
            shutil.rmtree(root, ignore_errors=True)
    assert "history-capture" not in [t.name for t in threading.enumerate()]
