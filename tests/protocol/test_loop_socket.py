"""LoopSocket, a plain ZeroMQ socket served on the asyncio loop: messages queued before it
starts and bursts longer than one turn all arrive in order, a send waits only while the
socket is full and goes once there is room, and closing fails a waiting send."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from tests.support.gateway import wait_for
from zodex_protocol.loop_socket import MESSAGES_PER_TURN, LoopSocket

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    a, b = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    for s in (a, b):
        s.setsockopt(zmq.LINGER, 0)
    a.bind(f"ipc://{tmp_path / 'pair'}")
    b.connect(f"ipc://{tmp_path / 'pair'}")
    try:
        yield a, b
    finally:
        a.close(linger=0)
        b.close(linger=0)
        context.term()


async def test_queued_messages_and_long_bursts_all_arrive_in_order(
    pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]],
) -> None:
    served, peer = pair
    peer.send_multipart([b"early", b"1"])
    assert served.poll(5000)  # queued before the loop watches the socket
    got: list[list[bytes]] = []
    wire = LoopSocket(served, got.append)
    await wait_for(lambda: len(got) == 1, what="the message queued before the start")
    count = MESSAGES_PER_TURN * 3 + 5
    for n in range(count):
        peer.send_multipart([b"burst", str(n).encode()])
    await wait_for(lambda: len(got) == 1 + count, what="every message of the burst")
    assert got == [[b"early", b"1"], *([b"burst", str(n).encode()] for n in range(count))]
    await wire.send([b"reply"])
    assert peer.poll(5000) and peer.recv_multipart() == [b"reply"]
    wire.close()
    assert served.closed


async def fill(wire: LoopSocket) -> tuple[int, asyncio.Task[None]]:
    """Send until a send has to wait; how many went, and the waiting send."""
    sent = 0
    while True:
        task = asyncio.create_task(wire.send([str(sent).encode()]))
        await asyncio.sleep(0)
        if not task.done():
            return sent, task
        await task
        sent += 1
        assert sent < 10_000, "the socket never filled"


async def test_a_send_waits_for_room_and_closing_fails_it(tmp_path: Path) -> None:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    push, pull = context.socket(zmq.PUSH), context.socket(zmq.PULL)
    try:
        push.setsockopt(zmq.SNDHWM, 1)
        pull.setsockopt(zmq.RCVHWM, 1)
        for s in (push, pull):
            s.setsockopt(zmq.LINGER, 0)
        pull.bind(f"ipc://{tmp_path / 'q'}")
        push.connect(f"ipc://{tmp_path / 'q'}")
        wire = LoopSocket(push, lambda _frames: None)
        sent, waiting = await fill(wire)
        received = []
        while not waiting.done():  # make room: the waiting send goes by itself
            await wait_for(lambda: waiting.done() or bool(pull.poll(0)), what="the waiting send to go")
            if pull.poll(0):
                received.append(pull.recv_multipart())
        await waiting
        while len(received) < sent + 1:
            assert pull.poll(5000)
            received.append(pull.recv_multipart())
        assert received == [[str(n).encode()] for n in range(sent + 1)]
        _, stuck = await fill(wire)
        wire.close()
        with pytest.raises(zmq.ZMQError):
            await asyncio.wait_for(stuck, 5)
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        context.term()
