"""Keeps a :class:`Board` current: the first snapshot, the event stream, and recovery.

The stream is opened before the snapshot is read, so nothing that happens in between is
lost. After a drop it reconnects with ``Last-Event-ID``; whether or not the hub still
holds that sequence, the records updated since the last event seen are re-read
(``recovery_since_ms``), which also covers a restarted runtime. A ``gap`` frame triggers
the same recovery. An observer without ``/v1/events`` (404) is polled instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from zodex_gateway.history import NO_AGENT
from zodex_gateway.viewers.tui.client import PAGE_LIMIT, ObserverClient, ObserverError, ServerEvent
from zodex_gateway.viewers.tui.model import Board, Paging

if TYPE_CHECKING:
    from zodex_gateway.local.observer_access import ObserverAccess

RETRY_FIRST: Final = 0.5
RETRY_MAX: Final = 5.0
RETRY_UNAUTHORIZED: Final = 10.0  # a rotated bearer needs a person, not a fast loop
POLL_SECONDS: Final = 2.0
# ServerEvent times and record update times are taken at slightly different moments.
RECOVERY_MARGIN_MS: Final = 2000


@dataclass(frozen=True)
class Connection:
    state: str  # connecting | live | polling | reconnecting | unauthorized
    detail: str = ""


def now_ms() -> int:
    return int(time.time() * 1000)


class Live:
    def __init__(
        self,
        client: ObserverClient,
        board: Board,
        *,
        on_change: Callable[[], None],
        on_state: Callable[[Connection], None],
        page_limit: int = PAGE_LIMIT,
        rediscover: Callable[[], ObserverAccess] | None = None,
    ) -> None:
        self.client = client
        self.page_limit = page_limit
        self._rediscover = rediscover
        self.board = board
        self._on_change = on_change
        self._on_state = on_state
        self._last_sequence: int | None = None
        self._since_ms: int | None = None  # recover from here after a drop
        self._synced = False
        self.connection = Connection("connecting")

    async def run(self) -> None:
        """Follow the observer until cancelled."""
        delay = RETRY_FIRST
        while True:
            try:
                async for event in self.client.events(
                    last_event_id=self._last_sequence, on_open=self._opened
                ):
                    await self._handle(event)
                    delay = RETRY_FIRST
                detail = "the event stream ended"
            except ObserverError as exc:
                detail = exc.message
                if exc.status in (0, 401) and await self._follow_rediscovery():
                    delay = RETRY_FIRST
                    continue
                if exc.status == 404:
                    try:
                        await self._poll()
                        delay = RETRY_FIRST
                        continue
                    except ObserverError as poll_exc:
                        detail = poll_exc.message
                elif exc.status == 401:
                    self._state(Connection("unauthorized", exc.message))
                    await asyncio.sleep(RETRY_UNAUTHORIZED)
                    continue
            self._state(Connection("reconnecting", f"{detail}; retrying in {delay:g}s"))
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)

    async def _follow_rediscovery(self) -> bool:
        """After a refused or failed connection: if discovery now names another observer
        (the runtime restarted on a new port, or the bearer was rotated), switch to it."""
        if self._rediscover is None:
            return False
        try:
            access = self._rediscover()
        except Exception:
            return False  # not running (yet): keep retrying the one we know
        old = self.client
        if access == old.access:
            return False
        self.client = ObserverClient(access)
        await old.aclose()
        if access.runtime_id != old.access.runtime_id:
            self._last_sequence = None  # another runtime numbers its events afresh
        return True

    async def select(self, agent_id: str | None) -> None:
        """Show ``agent_id``'s records (None: every agent's), reading its first page once."""
        self.board.show_all = agent_id is None
        if agent_id is not None:
            self.board.selected = agent_id
        self._on_change()
        if self._synced:
            await self._load_view(self.board.view_key)

    async def load_older(self) -> bool:
        """The next page back of the current view; False when there is none."""
        key = self.board.view_key
        paging = self.board.paging.get(key)
        if paging is None or paging.next_cursor is None:
            return False
        page = await self.client.timeline(agent_id=key, cursor=paging.next_cursor, limit=self.page_limit)
        paging.next_cursor = page.next_cursor
        self.board.upsert_records(page.records)
        self._on_change()
        return True

    def has_older(self) -> bool:
        paging = self.board.paging.get(self.board.view_key)
        return paging is not None and paging.next_cursor is not None

    async def _opened(self) -> None:
        if self._synced:
            await self._recover(self._since_ms)
        else:
            await self._snapshot()
        self._state(Connection("live"))

    async def _snapshot(self) -> None:
        started = now_ms()
        self.board.set_agents(await self.client.agents())
        # The calls with no agent have no entry in /v1/agents: their newest page tells
        # whether there are any, and when the last one was.
        await self._load_view(NO_AGENT)
        self.board.ensure_selection()
        await self._load_view(self.board.view_key)
        self._since_ms = started
        self._synced = True
        self._on_change()

    async def _load_view(self, key: str | None) -> None:
        if not self.board.show_all and key is None:
            return  # no agent yet: the first agent or unattributed call selects one
        paging = self.board.paging.get(key)
        if paging is not None and paging.loaded:
            return
        page = await self.client.timeline(agent_id=key, limit=self.page_limit)
        self.board.paging[key] = Paging(loaded=True, next_cursor=page.next_cursor)
        self.board.upsert_records(page.records)
        self._on_change()

    async def _recover(self, since_ms: int | None) -> None:
        started = now_ms()
        self.board.set_agents(await self.client.agents())
        if since_ms is not None:
            self.board.upsert_records(await self.client.recovery(max(0, since_ms - RECOVERY_MARGIN_MS)))
        self._since_ms = started
        self._on_change()

    async def _handle(self, event: ServerEvent) -> None:
        self._last_sequence = event.sequence
        if event.event_type == "gap":
            # The hub says when the first missed event happened (0: it does not know);
            # the last event this viewer saw bounds it too. The earlier one is safe.
            hinted = event.payload.get("recovery_since_ms")
            known = [t for t in (hinted, self._since_ms) if isinstance(t, int) and t > 0]
            await self._recover(min(known) if known else 0)
            return
        if event.emitted_at_ms:
            self._since_ms = max(self._since_ms or 0, event.emitted_at_ms)
        changed = self.board.apply(event)
        first = event.event_type == "agent_first_seen" or (
            event.event_type == "presentation_updated" and event.agent_id is None
        )
        if first and self.board.ensure_selection():
            await self._load_view(self.board.view_key)
        for agent_id in sorted(self.board.stale_agents):
            self.board.stale_agents.discard(agent_id)
            try:
                self.board.upsert_agent(await self.client.agent(agent_id))
            except ObserverError as exc:
                if exc.status != 404:
                    raise
            changed = True
        if changed:
            self._on_change()

    async def _poll(self) -> None:
        """No event stream on this observer: re-read what changed every few seconds."""
        if self._synced:
            await self._recover(self._since_ms)
            # A running command's output grows without its updated_at moving.
            for record in self.board.view():
                if record.get("kind") == "command" and record.get("status") == "running":
                    self.board.upsert_record(await self.client.record(record["presentation_id"]))
            self._on_change()
        else:
            await self._snapshot()
        self._state(Connection("polling", "no event stream"))
        await asyncio.sleep(POLL_SECONDS)

    def _state(self, connection: Connection) -> None:
        if connection != self.connection:
            self.connection = connection
            self._on_state(connection)
