"""The event hub: one numbered stream of what happens in a runtime, fanned out to viewers.

Publishing never waits. Each subscriber has its own bounded queue; one that falls behind
loses its queue and gets a single ``gap`` event instead, telling it to recover from the
timeline, so a slow or stuck viewer never stalls a tool call, a worker, or other viewers.
A ring of recent events lets a reconnecting viewer resume after ``Last-Event-ID``. Both the
ring and each queue are bounded in events and in bytes, so a flood of output watched by a
viewer holds a few tens of megabytes at most.

Everything here runs on the gateway's event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from zodex_gateway.history import NO_AGENT, agent_matches

SUBSCRIBER_QUEUE: Final = 2048
RING_SIZE: Final = 4096
# Bytes of frames kept, besides the counts: an output event carries up to a batch of output
# twice (text and display_text), so 4096 of them could hold gigabytes while a command floods.
SUBSCRIBER_QUEUE_BYTES: Final = 16 * 1024 * 1024
RING_BYTES: Final = 16 * 1024 * 1024
KEEPALIVE_S: Final = 15.0
# A viewer that recovers from a gap asks for records changed since a little before the
# first event it missed: updates land in history a moment before they are published.
RECOVERY_MARGIN_MS: Final = 2000

EVENT_TYPES: Final = frozenset(
    {
        "agent_first_seen",
        "agent_updated",
        "invocation_started",
        "invocation_completed",
        "presentation_updated",
        "output",
        "output_complete",
        "process_started",
        "process_ended",
        "gap",
    }
)


@dataclass(frozen=True)
class HubEvent:
    sequence: int
    event_type: str
    agent_id: str | None
    presentation_id: str | None
    emitted_at_ms: int
    payload: dict[str, Any]
    frame: bytes  # the SSE frame, encoded once however many viewers receive it

    @classmethod
    def make(
        cls,
        sequence: int,
        event_type: str,
        agent_id: str | None,
        presentation_id: str | None,
        payload: dict[str, Any],
        emitted_at_ms: int | None = None,
    ) -> HubEvent:
        emitted = round(time.time() * 1000) if emitted_at_ms is None else emitted_at_ms
        data = json.dumps(
            {
                "sequence": sequence,
                "event_type": event_type,
                "agent_id": agent_id,
                "presentation_id": presentation_id,
                "emitted_at_ms": emitted,
                "payload": payload,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )
        frame = f"id: {sequence}\ndata: {data}\n\n".encode()
        return cls(sequence, event_type, agent_id, presentation_id, emitted, payload, frame)


@dataclass(frozen=True)
class EventFilter:
    """Which events a subscriber wants (query parameters of ``/v1/events``). An agent id
    :data:`~zodex_gateway.history.NO_AGENT` stands for the events of calls with no agent."""

    agent_id: str | None = None
    include_output: bool = True
    output_agent_ids: frozenset[str] | None = None  # None: output of every agent

    def wants(self, event: HubEvent) -> bool:
        if event.event_type == "gap":
            return True
        if not agent_matches(self.agent_id, event.agent_id):
            return False
        if event.event_type == "output":
            if not self.include_output:
                return False
            if (
                self.output_agent_ids is not None
                and (event.agent_id or NO_AGENT) not in self.output_agent_ids
            ):
                return False
        return True


@dataclass(eq=False)  # compared and hashed by identity: kept in a set
class Subscription:
    filter: EventFilter
    _queue: deque[HubEvent] = field(default_factory=deque)
    _queued_bytes: int = 0
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _missed_from: int | None = None  # first sequence dropped since the last delivered gap
    _missed_since_ms: int = 0  # when that event was emitted (0: unknown, recover everything)
    closed: bool = False

    def offer(self, event: HubEvent) -> None:
        if not self.filter.wants(event):
            return
        full = len(self._queue) >= SUBSCRIBER_QUEUE
        if self._queue and (full or self._queued_bytes + len(event.frame) > SUBSCRIBER_QUEUE_BYTES):
            # Drop what it has not read; the gap (delivered first) covers it, and newer
            # events queue after the gap as usual.
            if self._missed_from is None:
                self._missed_from = self._queue[0].sequence
                self._missed_since_ms = self._queue[0].emitted_at_ms
            self._queue.clear()
            self._queued_bytes = 0
        self._queue.append(event)
        self._queued_bytes += len(event.frame)
        self._ready.set()

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def mark_missed(self, first_missed: int) -> None:
        """Events before this subscription started were lost to it (a resume from further
        back than the hub remembers); when they happened is unknown."""
        self._missed_from = first_missed
        self._missed_since_ms = 0
        self._ready.set()

    def wake(self) -> None:
        self._ready.set()

    async def next_events(self, timeout: float) -> list[HubEvent] | None:
        """What is queued (a gap first if events were lost); ``None`` after ``timeout``
        with nothing to send, so the caller can write a keepalive. Check :attr:`closed`
        after each call."""
        if not self._queue and self._missed_from is None and not self.closed:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return None
        events: list[HubEvent] = []
        if self._missed_from is not None:
            events.append(self._gap_event(self._missed_from))
            self._missed_from = None
        events.extend(self._queue)
        self._queue.clear()
        self._queued_bytes = 0
        return events

    def _gap_event(self, first_missed: int) -> HubEvent:
        now_ms = round(time.time() * 1000)
        payload = {
            "reason": "this viewer fell behind and events were dropped; reload the timeline",
            "first_missed_sequence": first_missed,
            "recovery_since_ms": max(0, self._missed_since_ms - RECOVERY_MARGIN_MS)
            if self._missed_since_ms
            else 0,
        }
        # A gap is this subscriber's own notice: it takes the number of the first event
        # it missed, so sequences a viewer sees never go backwards.
        return HubEvent.make(first_missed, "gap", None, None, payload, now_ms)


class EventHub:
    def __init__(self) -> None:
        self._sequence = 0
        self._ring: deque[HubEvent] = deque()
        self._ring_bytes = 0
        self._subscribers: set[Subscription] = set()

    @property
    def sequence(self) -> int:
        """The sequence of the newest event published so far."""
        return self._sequence

    @property
    def ring_bytes(self) -> int:
        """Bytes of the frames the ring holds for resuming viewers."""
        return self._ring_bytes

    @property
    def has_subscribers(self) -> bool:
        return bool(self._subscribers)

    @property
    def quiet(self) -> bool:
        """Nobody watches and nothing was published since the last skip (the ring is only
        emptied by one): another skip would change nothing a viewer could see, since a
        resume from before it gets a gap anyway. Two plain reads, safe from another thread."""
        return not self._subscribers and not self._ring

    def publish(
        self,
        event_type: str,
        payload: dict[str, Any],
        *,
        agent_id: str | None = None,
        presentation_id: str | None = None,
    ) -> HubEvent:
        if event_type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}")
        self._sequence += 1
        event = HubEvent.make(self._sequence, event_type, agent_id, presentation_id, payload)
        self._ring.append(event)
        self._ring_bytes += len(event.frame)
        while len(self._ring) > RING_SIZE or (self._ring_bytes > RING_BYTES and len(self._ring) > 1):
            self._ring_bytes -= len(self._ring.popleft().frame)
        for subscription in self._subscribers:
            subscription.offer(event)
        return event

    def skip(self) -> None:
        """Something happened that was not published (nobody was watching): take
        a number for it and forget the ring, so a resume from before it gets a gap."""
        self._sequence += 1
        self._ring.clear()
        self._ring_bytes = 0

    def subscribe(self, event_filter: EventFilter, *, after: int | None = None) -> Subscription:
        """A new subscription; with ``after`` (a ``Last-Event-ID``), the events since it
        are queued first when the ring still holds them, else the stream starts with a gap."""
        subscription = Subscription(event_filter)
        if after is not None and after > self._sequence:
            # A number this hub never gave: a viewer of the runtime before a restart. It
            # missed everything published since, and what changed in between.
            subscription.mark_missed(1)
        elif after is not None and after < self._sequence:
            oldest = self._ring[0].sequence if self._ring else self._sequence + 1
            if after + 1 < oldest:
                subscription.mark_missed(after + 1)
            for event in self._replay(after):
                subscription.offer(event)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        subscription.closed = True
        self._subscribers.discard(subscription)

    def close(self) -> None:
        """End every stream (the runtime is stopping): each subscriber's wait returns."""
        for subscription in list(self._subscribers):
            self.unsubscribe(subscription)
            subscription.wake()

    def _replay(self, after: int) -> Iterable[HubEvent]:
        return (event for event in self._ring if event.sequence > after)
