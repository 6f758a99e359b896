"""WorkerClient, one gateway's connection to one worker incarnation (docs/architecture.md#supervisor):
replies matched to requests by id on one socket, a timeout that leaves the client usable,
every in-flight request failed with WORKER_LOST when the worker dies, and replies that do not
verify ignored. A real worker where its behaviour matters; a stand-in ROUTER to forge replies."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import threading
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

from tests.support.gateway import wait_for
from tests.support.poll_probe import TYPED, PollProbe
from tests.support.worker_process import WorkerProcess, running_worker
from zodex_gateway.workers.worker_client import WorkerClient
from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.layout import WorkerRecord
from zodex_protocol.version import PROTOCOL_VERSION
from zodex_system import proctree

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def worker() -> Iterator[WorkerProcess]:
    with running_worker() as started:
        yield started


@asynccontextmanager
async def connected(
    record: WorkerRecord, key: bytes
) -> AsyncIterator[tuple[WorkerClient, list[WorkerClient]]]:
    """A client and the list its ``on_exit`` appends to."""
    context = zmq.asyncio.Context()
    exited: list[WorkerClient] = []
    client = WorkerClient(record, context, WireCodec(key), exited.append)
    try:
        yield client, exited
    finally:
        client.close()
        context.destroy(linger=0)


async def start_probe(client: WorkerClient, workdir: str, probe: PollProbe) -> str:
    """Start the probe's command and read its ``ready``; its handle."""
    body = {"cmd": probe.command, "workdir": workdir, "yield_time_ms": 50}
    started = await client.request(messages.EXEC, body, timeout=20)
    handle: str = started["session_handle"]
    out = started["output"]
    async with asyncio.timeout(20):
        while "ready" not in out:
            polled = await client.request(
                messages.WRITE, {"session_handle": handle, "yield_time_ms": 5000}, 20
            )
            assert polled["status"] == "running", polled
            out += polled["output"]
    return handle


def poll(client: WorkerClient, handle: str) -> asyncio.Task[Any]:
    """A poll that types the probe's line: it waits in the worker until the probe is released."""
    body = {"session_handle": handle, "chars": TYPED, "yield_time_ms": 20000}
    return asyncio.create_task(client.request(messages.WRITE, body, timeout=30))


async def test_replies_find_their_requests_on_one_socket(worker: WorkerProcess, tmp_path: Path) -> None:
    probe = PollProbe.make(tmp_path)
    async with connected(worker.record, worker.key) as (client, _):
        handle = await start_probe(client, worker.workdir, probe)
        waiting = poll(client, handle)
        await wait_for(probe.reached, what="the poll to reach the worker")
        # The ping is sent after the poll and answered first: its reply must not go to the poll.
        pong = await client.request(messages.PING, {}, timeout=10)
        assert pong["live_sessions"] == 1
        assert not waiting.done()
        probe.release()
        ended = await asyncio.wait_for(waiting, 10)
    assert ended["status"] == "exited" and ended["output"] == "released\n", ended


async def test_an_error_reply_raises_its_code(worker: WorkerProcess) -> None:
    async with connected(worker.record, worker.key) as (client, exited):
        with pytest.raises(ProtocolError) as caught:
            await client.request(messages.WRITE, {"session_handle": "no-such-handle"}, timeout=10)
        assert caught.value.code == ErrorCode.UNKNOWN_HANDLE
        assert client.alive and exited == []
        assert (await client.request(messages.PING, {}, timeout=10))["live_sessions"] == 0


async def test_a_timeout_forgets_the_request_and_keeps_the_client(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    probe = PollProbe.make(tmp_path)
    async with connected(worker.record, worker.key) as (client, exited):
        handle = await start_probe(client, worker.workdir, probe)
        body = {"session_handle": handle, "chars": TYPED, "yield_time_ms": 20000}
        with pytest.raises(TimeoutError):
            await client.request(messages.WRITE, body, timeout=0.5)
        assert client._pending == {}
        # The poll did reach the worker; released, it answers late and resolves nothing.
        await wait_for(probe.reached, what="the poll to reach the worker")
        probe.release()
        final = await client.request(messages.WRITE, {"session_handle": handle, "yield_time_ms": 5000}, 20)
        assert final["status"] == "exited"
        assert (await client.request(messages.PING, {}, timeout=10))["live_sessions"] == 0
        assert client.alive and exited == []


async def test_worker_death_fails_every_request_in_flight(worker: WorkerProcess, tmp_path: Path) -> None:
    probes = [PollProbe.make(tmp_path, "first"), PollProbe.make(tmp_path, "second")]
    async with connected(worker.record, worker.key) as (client, exited):
        handles = [await start_probe(client, worker.workdir, probe) for probe in probes]
        polls = [poll(client, handle) for handle in handles]
        for probe in probes:
            await wait_for(probe.reached, what=f"the poll to reach the worker ({probe.marker.name})")
        os.kill(worker.process.pid, signal.SIGKILL)
        for waiting in polls:
            with pytest.raises(ProtocolError) as caught:
                await asyncio.wait_for(waiting, 10)
            assert caught.value.code == ErrorCode.WORKER_LOST
        assert exited == [client] and not client.alive
        # Nothing more is sent to a dead worker: the refusal is immediate.
        with pytest.raises(ProtocolError) as caught:
            await asyncio.wait_for(client.request(messages.PING, {}), 1)
        assert caught.value.code == ErrorCode.WORKER_LOST
        client.mark_dead()
        assert exited == [client], "on_exit is called once"


async def test_replies_that_do_not_verify_or_match_are_ignored() -> None:
    """A stand-in worker answers one request three times: signed with another key, signed
    but for another request, then genuinely. Only the genuine reply resolves it."""
    key, other_key = b"k" * 32, b"x" * 32
    codec = WireCodec(key)
    root = Path(tempfile.mkdtemp(prefix="zx", dir="/tmp"))
    endpoint = f"ipc://{root / 'req'}"
    me = proctree.read_proc(os.getpid())
    assert me is not None
    # Our own pid stands in for the worker's process: it stays alive for the whole test.
    record = WorkerRecord(
        "w0", 1, os.getpid(), me.start, str(root), endpoint, f"ipc://{root / 'pub'}", PROTOCOL_VERSION
    )
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(endpoint)
    try:
        async with connected(record, key) as (client, _):
            asked = asyncio.create_task(client.request(messages.PING, {}, timeout=10))
            identity, *frames = await asyncio.wait_for(router.recv_multipart(), 10)
            request = codec.deserialize(frames)
            forged = WireCodec(other_key).serialize(request.reply(messages.PONG, {"live_sessions": 666}))
            stray = codec.serialize(
                Envelope(type=messages.PONG, body={"live_sessions": 777}, reply_to="other")
            )
            genuine = codec.serialize(request.reply(messages.PONG, {"live_sessions": 1}))
            for reply in (forged, stray, [b"one frame"], genuine):
                await router.send_multipart([identity, *reply])
            assert await asyncio.wait_for(asked, 10) == {"live_sessions": 1}
            assert client.alive
    finally:
        router.close(linger=0)
        context.destroy(linger=0)
        for leftover in root.iterdir():
            leftover.unlink()
        root.rmdir()


async def test_retire_stops_only_an_idle_worker(worker: WorkerProcess, tmp_path: Path) -> None:
    retire = {"stopping": False}
    async with connected(worker.record, worker.key) as (client, _exited):
        running = await client.request(
            messages.EXEC, {"cmd": "sleep 60", "workdir": worker.workdir, "yield_time_ms": 50}, 20
        )
        assert await client.request(messages.RETIRE, {}, timeout=10) == retire, "a command runs"
        await client.request(
            messages.WRITE, {"session_handle": running["session_handle"], "chars": "\x03"}, 20
        )
        # The command ended but left a job behind: stopping would kill it.
        marker = tmp_path / "job.pid"
        left = await client.request(
            messages.EXEC,
            {
                "cmd": f"trap '' HUP; sleep 60 >/dev/null 2>&1 & echo $! > {marker}",
                "workdir": worker.workdir,
                "yield_time_ms": 2000,
            },
            20,
        )
        assert left["status"] == "exited" and left["background_processes"] == 1, left
        job = int(marker.read_text())
        assert await client.request(messages.RETIRE, {}, timeout=10) == retire, "a left-behind job runs"
        assert worker.process.poll() is None
        os.kill(job, signal.SIGKILL)
        # Reaped by the worker (its subreaper), not only dead: until then it still counts.
        await wait_for(lambda: not os.path.exists(f"/proc/{job}"), what="the worker to reap the job")
        assert await client.request(messages.RETIRE, {}, timeout=10) == {"stopping": True}
    assert worker.wait_exit() == 0
    assert worker.layout.exit_file(worker.worker_id, worker.incarnation).is_file()


@asynccontextmanager
async def stand_in_worker(
    key: bytes, **client_args: Any
) -> AsyncIterator[tuple[WorkerClient, zmq.asyncio.Socket]]:
    """A client connected to a stand-in worker's ROUTER, which the test answers with."""
    root = Path(tempfile.mkdtemp(prefix="zx", dir="/tmp"))
    endpoint = f"ipc://{root / 'req'}"
    me = proctree.read_proc(os.getpid())
    assert me is not None
    record = WorkerRecord(
        "w0", 1, os.getpid(), me.start, str(root), endpoint, f"ipc://{root / 'pub'}", PROTOCOL_VERSION
    )
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(endpoint)
    client = WorkerClient(record, context, WireCodec(key), lambda _c: None, **client_args)
    try:
        yield client, router
    finally:
        client.close()
        router.close(linger=0)
        context.destroy(linger=0)
        for leftover in root.iterdir():
            leftover.unlink()
        root.rmdir()


async def test_a_reply_over_the_maximum_message_size_is_never_read() -> None:
    """ZMQ_MAXMSGSIZE on the client's socket: a 'worker' sending more than the argument
    limits allow is cut off before its frame is buffered; the request fails by its timeout."""
    key = b"k" * 32
    codec = WireCodec(key)
    async with stand_in_worker(key, max_message=64 * 1024) as (client, router):
        asked = asyncio.create_task(client.request(messages.PING, {}, timeout=3))
        identity, *frames = await asyncio.wait_for(router.recv_multipart(), 10)
        request = codec.deserialize(frames)
        huge = codec.serialize(request.reply(messages.PONG, {"pad": "x" * (256 * 1024)}))
        await router.send_multipart([identity, *huge])
        with pytest.raises(TimeoutError):
            await asked


async def test_a_reply_bomb_is_refused_within_bounds() -> None:
    """Signed (the agent holds the runtime key in Sprite), small on the wire, millions of
    empty maps once decoded: refused, and the genuine reply after it is still read."""
    key = b"k" * 32
    codec = WireCodec(key)
    async with stand_in_worker(key) as (client, router):
        asked = asyncio.create_task(client.request(messages.PING, {}, timeout=20))
        identity, *frames = await asyncio.wait_for(router.recv_multipart(), 10)
        request = codec.deserialize(frames)
        bomb = codec.serialize(request.reply(messages.PONG, {"maps": [{}] * 2_000_000}))
        genuine = codec.serialize(request.reply(messages.PONG, {"live_sessions": 1}))
        tracemalloc.start()
        try:
            await router.send_multipart([identity, *bomb])
            await router.send_multipart([identity, *genuine])
            assert await asyncio.wait_for(asked, 20) == {"live_sessions": 1}
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # Unbounded, 2,000,000 dicts cost well over 100 MB.
        assert peak < 40 * 1024 * 1024, peak


async def test_a_large_reply_is_decoded_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    key = b"k" * 32
    codec = WireCodec(key)
    threads: list[threading.Thread] = []
    decode = WireCodec.decode

    def recording(self: WireCodec, frames: list[bytes]) -> Envelope:
        threads.append(threading.current_thread())
        return decode(self, frames)

    monkeypatch.setattr(WireCodec, "decode", recording)
    async with stand_in_worker(key) as (client, router):
        for size in (100, 2 * 1024 * 1024):
            asked = asyncio.create_task(client.request(messages.PING, {}, timeout=20))
            identity, *frames = await asyncio.wait_for(router.recv_multipart(), 10)
            request = codec.deserialize(frames)
            await router.send_multipart(
                [identity, *codec.serialize(request.reply(messages.PONG, {"pad": "x" * size}))]
            )
            assert (await asyncio.wait_for(asked, 20))["pad"] == "x" * size
    main = threading.main_thread()
    # The request's own decode (by the stand-in) runs here too; the last two are the client's.
    assert threads[-1] is not main, "the 2 MiB reply: on a thread"
    assert main in threads[:-1], "a small reply: on the loop"
