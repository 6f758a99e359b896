"""Slow clients must not use up a listening process's descriptors (docs/modes.md#http-listeners).

Every HTTP listener (MCP, the observer API, the watch host) runs uvicorn
(:mod:`zodex_gateway.web.server`) with the protocol below. A connection is *waiting for
headers* from the moment it is accepted, and again from the moment a response on it is
complete, until the next request's headers have all arrived.
Such a connection is closed when it has waited ``header_timeout_s``, and a process keeps at
most ``max_pending`` of them across its listeners: a new one closes the oldest. The cap is
also kept to a quarter of the process's descriptor limit, so waiting connections can never
starve the descriptors a tool call needs (PTYs, spill files, sockets to workers). At start a
listening process raises its soft ``RLIMIT_NOFILE`` to the hard limit
(:mod:`zodex_system.descriptor_limit`).

A connection whose request is being served is never closed here: a client that finished its
headers is in the application's hands (which checks its token before reading anything large).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar, Final, Protocol

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("zodex.gateway")

DEFAULT_HEADER_TIMEOUT_S: Final = 5.0
DEFAULT_MAX_PENDING: Final = 256
DEFAULT_MAX_BODY: Final = 64 * 1024 * 1024
# Never let the descriptor-derived cap fall so low that a few idle keep-alive connections
# would push out a real client's fresh one.
MIN_PENDING_CAP: Final = 8
SUMMARY_EVERY_S: Final = 60.0


class ListenerSettings(Protocol):
    """The typed reads of ``LocalConfig`` these limits need (config sits beside web, not below)."""

    def duration_ms(self, key: str) -> int: ...

    def size_bytes(self, key: str) -> int: ...

    def integer(self, key: str) -> int: ...


@dataclass(frozen=True)
class ListenerLimits:
    """The limits of one process's listeners, from ``http.header-timeout``,
    ``http.max-pending-connections`` and ``mcp.max-body`` (docs/config.md#keys)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_pending: int = DEFAULT_MAX_PENDING
    max_body: int = DEFAULT_MAX_BODY

    @classmethod
    def from_config(cls, config: ListenerSettings) -> ListenerLimits:
        """From Local's configuration (a ``LocalConfig``)."""
        return cls(
            header_timeout_s=config.duration_ms("http.header-timeout") / 1000,
            max_pending=config.integer("http.max-pending-connections"),
            max_body=config.size_bytes("mcp.max-body"),
        )


def pending_cap(max_pending: int) -> int:
    """``max_pending``, but at most a quarter of the current soft descriptor limit (read on
    every call: an operator may lower it with ``prlimit`` while we run)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft < 0:
        return max_pending
    return min(max_pending, max(MIN_PENDING_CAP, soft // 4))


class SlowClients:
    """The connections of one process that are waiting for request headers, oldest first."""

    def __init__(self, limits: ListenerLimits) -> None:
        self.limits = limits
        self._waiting: OrderedDict[HeaderDeadlineProtocol, asyncio.TimerHandle] = OrderedDict()
        self._closed = 0
        self._last_summary: float | None = None
        self.protocol = _protocol_class(self)

    def __len__(self) -> int:
        return len(self._waiting)

    def waiting(self, conn: HeaderDeadlineProtocol) -> None:
        """``conn`` now waits for a request's headers: the deadline starts, and the oldest
        waiting connection is closed if this one would exceed the cap."""
        self.arrived(conn)
        cap = pending_cap(self.limits.max_pending)
        while len(self._waiting) >= cap:
            oldest, timer = self._waiting.popitem(last=False)
            timer.cancel()
            self._close(oldest)
        self._waiting[conn] = conn.loop.call_later(self.limits.header_timeout_s, self._expired, conn)

    def arrived(self, conn: HeaderDeadlineProtocol) -> None:
        """``conn`` sent a request's headers, or is gone."""
        timer = self._waiting.pop(conn, None)
        if timer is not None:
            timer.cancel()

    def _expired(self, conn: HeaderDeadlineProtocol) -> None:
        if self._waiting.pop(conn, None) is not None:
            self._close(conn)

    def _close(self, conn: HeaderDeadlineProtocol) -> None:
        conn.close_slow()
        self._closed += 1
        now = time.monotonic()
        if self._last_summary is None or now - self._last_summary >= SUMMARY_EVERY_S:
            # One line a minute at most: a flood must not flood the log too.
            log.warning(
                "closed %d connection(s) that did not send request headers within %gs "
                "or exceeded %d waiting connections",
                self._closed,
                self.limits.header_timeout_s,
                pending_cap(self.limits.max_pending),
            )
            self._closed = 0
            self._last_summary = now


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, telling :class:`SlowClients` when a connection starts and
    stops waiting for request headers. uvicorn itself has no header deadline: its
    keep-alive timer is cancelled by any byte received."""

    slow_clients: ClassVar[SlowClients]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.slow_clients.waiting(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.slow_clients.arrived(self)
        super().connection_lost(exc)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a new request cycle: its headers are complete
            self.slow_clients.arrived(self)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request already received
        idle = self.cycle is None or self.cycle.response_complete
        if idle and not self.transport.is_closing():
            self.slow_clients.waiting(self)

    def close_slow(self) -> None:
        # abort, not close: a client that reads nothing must not keep the descriptor
        # through a write buffer that never drains.
        self.transport.abort()


def _protocol_class(slow_clients: SlowClients) -> type[HeaderDeadlineProtocol]:
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"slow_clients": slow_clients})
