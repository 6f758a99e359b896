"""A plain ZeroMQ socket served on an asyncio loop, without pyzmq's asyncio layer.

pyzmq's asyncio sockets make a future for every receive and send and settle each through
the loop: about a sixth of a gateway's loop time on a trivial call
(docs/benchmarks.md#where-the-time-goes). Here the socket's descriptor (``ZMQ_FD``) calls
one callback, which hands every message already queued to ``on_message``, and a send is a
plain non-blocking send that waits only while the socket is full.

``ZMQ_FD`` signals edges ("the socket's state may have changed"), and any send or receive
may consume one: so the callback takes messages until ``ZMQ_EVENTS`` says none is left, and
after every send the socket is looked at again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import zmq

MESSAGES_PER_TURN = 256  # then other callbacks on the loop get a turn


def plain_socket(context: zmq.Context[Any], kind: int) -> zmq.Socket[bytes]:
    """A plain socket made by ``context`` (an asyncio one too), so that destroying the
    context closes it as it closes the context's other sockets."""
    made: zmq.Socket[bytes] = context.socket(kind, socket_class=zmq.Socket)
    return made


class LoopSocket:
    def __init__(self, socket: zmq.Socket[bytes], on_message: Callable[[list[bytes]], None]) -> None:
        self.socket = socket
        self._on_message = on_message
        self._loop = asyncio.get_running_loop()
        self._fd = int(socket.getsockopt(zmq.FD))
        self._scheduled = False
        self._reading = True
        self._writable: list[asyncio.Future[None]] = []
        self._loop.add_reader(self._fd, self._take)
        self._look_again()  # messages may be queued already, with no edge to come

    def _look_again(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._take)

    def _take(self) -> None:
        self._scheduled = False
        socket = self.socket
        for _ in range(MESSAGES_PER_TURN):
            if socket.closed or not self._reading:
                return
            try:
                events = int(socket.getsockopt(zmq.EVENTS))
            except zmq.ZMQError:  # closed under us (its context destroyed)
                self.stop_reading()
                return
            if events & zmq.POLLOUT and self._writable:
                for waiter in self._writable:
                    if not waiter.done():
                        waiter.set_result(None)
                self._writable.clear()
            if not events & zmq.POLLIN:
                return
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._on_message(frames)
        self._look_again()

    async def send(self, frames: list[bytes]) -> None:
        """Send now; only while the socket is full (its high-water mark), wait for room."""
        while True:
            try:
                self.socket.send_multipart(frames, zmq.NOBLOCK)
                break
            except zmq.Again:
                waiter = self._loop.create_future()
                self._writable.append(waiter)
                self._look_again()
                await waiter
        if not self.socket.closed and int(self.socket.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            self._look_again()

    def stop_reading(self) -> None:
        """Take no more messages; sends still work (a last reply may leave)."""
        if self._reading:
            self._reading = False
            if not self.socket.closed:
                self._loop.remove_reader(self._fd)

    def close(self) -> None:
        """Stop reading and close the socket; a send waiting for room then fails as a send on
        a closed socket does (``zmq.ZMQError``)."""
        self.stop_reading()
        if not self.socket.closed:
            self.socket.close(linger=0)
        for waiter in self._writable:
            if not waiter.done():
                waiter.set_result(None)
        self._writable.clear()
