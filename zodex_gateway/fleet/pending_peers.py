"""A cap on a host's connections that have not authenticated (docs/fleet.md#the-wire).

libzmq accepts every TCP connection to the host's ROUTER and keeps it until the CURVE
handshake ends or ``HANDSHAKE_IVL`` passes: a peer with no key could hold as many
descriptors as it opens. :class:`PendingPeers` watches the socket's monitor: each accepted
connection is remembered by its descriptor and its address pair; when more than ``cap``
have not got past the CURVE ``HELLO`` — what the kernel counts as received from the peer
(``tcpi_bytes_received``) is at most a greeting and a ``HELLO`` — the oldest of them is shut
down (``shutdown(2)``; libzmq then closes it). A gateway with an allowed key has sent its
``INITIATE`` within one round trip and is never counted; a peer that sent one with a key
that is not allowed is closed by libzmq itself.

A descriptor is touched only while it still names the connection that was accepted (same
local and remote address): libzmq may have closed it and reused the number.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections import OrderedDict
from typing import Final

import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("zodex.host")

# ZMTP 3 greeting (64 bytes) and a framed CURVE HELLO (202 bytes), with room to spare but
# far below a HELLO and an INITIATE (at least 259 bytes more).
PAST_HELLO_BYTES: Final = 64 + 202 + 128
_TCP_INFO_BYTES: Final = 232
_BYTES_RECEIVED_AT: Final = 128  # struct tcp_info: tcpi_bytes_received (Linux 4.1+)
LOG_EVERY_S: Final = 60.0  # a flood adds at most a line a minute to the log
_EVENTS: Final = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


def _addresses(fd: int) -> tuple[object, object] | None:
    """The local and remote address of TCP socket ``fd``, or None (not one, or closed)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        return sock.getsockname(), sock.getpeername()
    except OSError:
        return None
    finally:
        sock.detach()  # libzmq's descriptor: never closed here


def _bytes_received(fd: int) -> int | None:
    sock = socket.socket(fileno=fd)
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
    except OSError:
        return None
    finally:
        sock.detach()
    if len(info) < _BYTES_RECEIVED_AT + 8:
        return None
    received: int = struct.unpack_from("=Q", info, _BYTES_RECEIVED_AT)[0]
    return received


def _shut_down(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    try:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.detach()


class PendingPeers:
    """Watches ``router``'s monitor; at most ``cap`` connections short of a CURVE INITIATE."""

    def __init__(self, router: zmq.asyncio.Socket, cap: int) -> None:
        self._router = router
        self.cap = cap
        self.dropped = 0
        self._unlogged = 0
        self._logged_at = -LOG_EVERY_S
        self._monitor = router.get_monitor_socket(_EVENTS)
        self._pending: OrderedDict[int, tuple[float, tuple[object, object]]] = OrderedDict()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(zmq.ZMQError):
            self._router.disable_monitor()
        self._monitor.close(linger=0)
        self._log(time.monotonic(), final=True)

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def _watch(self) -> None:
        while True:
            event = await recv_monitor_message(self._monitor)
            fd = event["value"]
            if event["event"] == zmq.EVENT_ACCEPTED:
                addresses = _addresses(fd)
                if addresses is not None:
                    self._pending[fd] = (time.monotonic(), addresses)
                    self._enforce()
            elif event["event"] in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                self._pending.pop(fd, None)

    def _enforce(self) -> None:
        if len(self._pending) <= self.cap:
            return
        for fd, (_since, addresses) in list(self._pending.items()):
            if _addresses(fd) != addresses:
                del self._pending[fd]  # closed (and perhaps reused): not ours to touch
                continue
            received = _bytes_received(fd)
            if received is None or received >= PAST_HELLO_BYTES:
                del self._pending[fd]  # authenticated, or about to be refused by libzmq
        over = len(self._pending) - self.cap
        for fd in list(self._pending)[: max(over, 0)]:  # the oldest first
            del self._pending[fd]
            _shut_down(fd)
            self.dropped += 1
        if over > 0:
            self._unlogged += over
            self._log(time.monotonic())

    def _log(self, now: float, *, final: bool = False) -> None:
        if self._unlogged and (final or now - self._logged_at >= LOG_EVERY_S):
            log.warning(
                "dropped %d connections that had not authenticated, the oldest first "
                "(over host.max-pending-connections = %d)",
                self._unlogged, self.cap,
            )  # fmt: skip
            self._unlogged = 0
            self._logged_at = now
