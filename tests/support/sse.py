"""Reading server-sent events the way a viewer does: frames of ``id:`` and ``data:`` lines.

Hand-written, not httpx2's parser as in the terminal viewer: these tests also check the
comments (``: connected``, ``: keepalive``), which that parser drops."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2

from tests.support.slowdown import scaled


class SseStream:
    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self.events: list[dict[str, Any]] = []
        self.ids: list[int] = []
        self.comments: list[str] = []
        self._lines = response.aiter_lines()

    async def next_frame(self) -> dict[str, Any] | None:
        """The next event (``None`` when the stream ends); comments are collected."""
        data: list[str] = []
        async for line in self._lines:
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
            elif line.startswith("id:"):
                self.ids.append(int(line[3:].strip()))
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif line == "" and data:
                event: dict[str, Any] = json.loads("\n".join(data))
                self.events.append(event)
                return event
        return None

    async def until(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 15.0
    ) -> dict[str, Any]:
        """Read on until an event matches; fails after ``timeout`` seconds (scaled by
        ``ZODEX_TEST_SLOWDOWN``)."""
        timeout = scaled(timeout)

        async def read() -> dict[str, Any]:
            while True:
                event = await self.next_frame()
                if event is None:
                    raise AssertionError(
                        f"stream ended; events seen: {[e['event_type'] for e in self.events]}"
                    )
                if predicate(event):
                    return event

        try:
            return await asyncio.wait_for(read(), timeout)
        except TimeoutError:
            seen = [(e["event_type"], e.get("presentation_id")) for e in self.events]
            raise AssertionError(f"no matching event in {timeout}s; seen: {seen}") from None

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event_type"] == event_type]


@asynccontextmanager
async def sse(
    base_url: str, bearer: str, query: str = "", headers: dict[str, str] | None = None
) -> AsyncIterator[SseStream]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(scaled(30.0))) as client,
        client.stream(
            "GET",
            f"{base_url}/v1/events{query}",
            headers={"Authorization": f"Bearer {bearer}", **(headers or {})},
        ) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        stream = SseStream(response)
        yield stream
