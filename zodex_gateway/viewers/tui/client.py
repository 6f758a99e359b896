"""A small async client of the observer API (see docs/observer.md): JSON routes and the SSE
stream, with no knowledge of the terminal viewer that uses it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import httpx2
from httpx2 import EventSource, ServerSentEvent

if TYPE_CHECKING:
    # Only a type here: the viewer gets the access object from its caller.
    from zodex_gateway.local.observer_access import ObserverAccess


PAGE_LIMIT: Final = 100
# The hub sends a keepalive comment every 15 s: three missed ones mean the link is dead.
EVENTS_READ_TIMEOUT: Final = 45.0
REQUEST_TIMEOUT: Final = 10.0
# A frame larger than a subscriber's whole queue (docs/observer.md) cannot come from the hub.
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024


class ObserverError(Exception):
    """A request the observer refused or could not answer; ``status`` 0 = never reached it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ServerEvent:
    """One ``data:`` frame of ``/v1/events``."""

    sequence: int
    event_type: str
    agent_id: str | None
    presentation_id: str | None
    emitted_at_ms: int
    payload: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerEvent:
        payload = data.get("payload")
        return cls(
            sequence=int(data.get("sequence") or 0),
            event_type=str(data.get("event_type") or ""),
            agent_id=data.get("agent_id"),
            presentation_id=data.get("presentation_id"),
            emitted_at_ms=int(data.get("emitted_at_ms") or 0),
            payload=payload if isinstance(payload, dict) else {},
        )


def decode_event(sse: ServerSentEvent) -> ServerEvent | None:
    """One frame of the stream (the SSE parser has skipped the comments and joined its ``data:``
    lines); None for a frame that is not a JSON object: one bad frame must not end the
    stream. Its ``id:`` is the event's ``sequence``, which a reconnect resumes from."""
    try:
        data = json.loads(sse.data)
    except ValueError:
        return None
    return ServerEvent.from_json(data) if isinstance(data, dict) else None


@dataclass(frozen=True)
class TimelinePage:
    records: list[dict[str, Any]]
    next_cursor: str | None


class ObserverClient:
    """``GET`` routes of the observer as plain dicts, and one-connection event streams."""

    def __init__(self, access: ObserverAccess, *, transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.access = access
        self._http = httpx2.AsyncClient(
            base_url=access.base_url,
            headers=access.headers,
            timeout=REQUEST_TIMEOUT,
            transport=transport,
            trust_env=False,  # an HTTP(S)_PROXY in the environment must never see the bearer
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def status(self) -> dict[str, Any]:
        return await self._get("/v1/status")

    async def agents(self) -> list[dict[str, Any]]:
        agents: list[dict[str, Any]] = (await self._get("/v1/agents"))["agents"]
        return agents

    async def agent(self, agent_id: str) -> dict[str, Any]:
        return await self._get(f"/v1/agents/{agent_id}")

    async def timeline(
        self,
        *,
        agent_id: str | None = None,
        cursor: str | None = None,
        before_ms: int | None = None,
        recovery_since_ms: int | None = None,
        limit: int = PAGE_LIMIT,
    ) -> TimelinePage:
        params: dict[str, str | int] = {"limit": limit}
        for name, value in (
            ("agent_id", agent_id),
            ("cursor", cursor),
            ("before_ms", before_ms),
            ("recovery_since_ms", recovery_since_ms),
        ):
            if value is not None:
                params[name] = value
        data = await self._get("/v1/timeline", params)
        return TimelinePage(list(data["records"]), data.get("next_cursor"))

    async def recovery(self, since_ms: int, *, max_pages: int = 20) -> list[dict[str, Any]]:
        """Every record updated at or after ``since_ms`` (bounded, newest first)."""
        records: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(max_pages):
            page = await self.timeline(recovery_since_ms=since_ms, cursor=cursor)
            records.extend(page.records)
            cursor = page.next_cursor
            if cursor is None:
                break
        return records

    async def record(self, presentation_id: str) -> dict[str, Any]:
        return await self._get(f"/v1/timeline/{presentation_id}")

    async def invocation(self, invocation_id: str) -> dict[str, Any]:
        return await self._get(f"/v1/invocations/{invocation_id}")

    async def output(
        self,
        invocation_id: str,
        *,
        cursor: str | None = None,
        view: str = "display",
        limit: int | None = None,
    ) -> dict[str, Any]:
        params: dict[str, str | int] = {"view": view}
        if cursor is not None:
            params["cursor"] = cursor
        if limit is not None:
            params["limit"] = limit
        return await self._get(f"/v1/invocations/{invocation_id}/output", params)

    async def events(
        self,
        *,
        last_event_id: int | None = None,
        agent_id: str | None = None,
        include_output: bool = True,
        on_open: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncIterator[ServerEvent]:
        """Frames of one ``/v1/events`` connection until it ends; raises :class:`ObserverError`
        when it cannot be opened or drops. ``on_open`` runs once the stream is accepted,
        before any frame is read, so a snapshot taken there misses nothing."""
        params: dict[str, str] = {}
        if agent_id is not None:
            params["agent_id"] = agent_id
        if not include_output:
            params["include_output"] = "false"
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        timeout = httpx2.Timeout(REQUEST_TIMEOUT, read=EVENTS_READ_TIMEOUT)
        try:
            async with self._http.stream(
                "GET", "/v1/events", params=params, headers=headers, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise ObserverError(response.status_code, _error_text(response))
                if on_open is not None:
                    await on_open()
                async for sse in EventSource(response, max_event_size=MAX_FRAME_BYTES):
                    event = decode_event(sse)
                    if event is not None:
                        yield event
        except httpx2.HTTPError as exc:  # SSEError (not an event stream, a frame too large) is one too
            raise ObserverError(0, _transport_text(exc)) from exc

    async def _get(self, path: str, params: dict[str, str | int] | None = None) -> dict[str, Any]:
        try:
            response = await self._http.get(path, params=params)
        except httpx2.HTTPError as exc:
            raise ObserverError(0, _transport_text(exc)) from exc
        if response.status_code != 200:
            raise ObserverError(response.status_code, _error_text(response))
        data = response.json()
        if not isinstance(data, dict):
            raise ObserverError(
                response.status_code, "the observer answered with something other than an object"
            )
        return data


def _error_text(response: httpx2.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.reason_phrase or "error"
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return response.reason_phrase or "error"


def _transport_text(exc: httpx2.HTTPError) -> str:
    if isinstance(exc, httpx2.ConnectError):
        return "cannot reach the observer (is the runtime running?)"
    if isinstance(exc, httpx2.ReadTimeout):
        return "the observer stopped answering"
    return str(exc) or type(exc).__name__
