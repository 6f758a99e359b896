"""The observer's HTTP app: JSON and server-sent events over the history store and the
event hub, behind a bearer (docs/observer.md).

It is read-only but for one route, an agent's alias (Liveboard's editor), and, with
``observer.steer``, the steer route (:mod:`.steer`), which takes its own token. One ASGI guard
wraps everything: it answers a Host that is not this listener's loopback address with 421
and a missing or wrong bearer with 401 (the rules every listener shares, in
:mod:`zodex_gateway.web.guard`), OPTIONS and every other non-GET with 405, turns any
unexpected failure into a JSON 500, and puts ``Cache-Control: no-store`` on every
response. No CORS headers are ever sent, so a browser page of another origin can neither
read nor preflight the API.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Scope

from zodex_gateway.agents.alias import clean_alias
from zodex_gateway.history import AgentRecord, HistoryStore, HistoryUnavailable, Invocation
from zodex_gateway.observer import timeline
from zodex_gateway.observer.display import shown_text
from zodex_gateway.observer.hub import KEEPALIVE_S, EventFilter, EventHub, Subscription
from zodex_gateway.observer.paging import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ApiError,
    decode_cursor,
    encode_cursor,
    page_after,
    parse_choice,
    position,
    position_cursor,
    query_int,
)
from zodex_gateway.observer.steer import CallWatcher, Steering, SteerRoute, is_steer_route
from zodex_gateway.observer.views import (
    API_SCHEMA_VERSION,
    API_VERSION,
    agent_entry,
    invocation_detail,
    invocation_summary,
    iso_utc,
)
from zodex_gateway.redaction import SECRETS, SecretRegistry
from zodex_gateway.web import guard
from zodex_protocol.errors import ProtocolError

log = logging.getLogger("zodex.gateway")

OUTPUT_DEFAULT_CHARS = 65536
OUTPUT_MAX_CHARS = 1024 * 1024
_NO_STORE = (b"cache-control", b"no-store")
ERRORS: Final = guard.JsonErrors(schema_version=API_SCHEMA_VERSION)
MAX_ALIAS_BODY: Final = 4096
MAX_MS: Final = 2**53
STEER_OFF: Final = "typing into sessions is off; set observer.steer = true and restart Zodex Local"
T = TypeVar("T")


def _admission(bearer: Callable[[], str], steering: Steering | None) -> guard.Admit:
    """The bearer, then the method: GET, or the alias route. The steer route takes the
    steer token instead, and only that (docs/observer.md#a-person-types-into-a-session)."""

    def admit(scope: Scope) -> Scope | Response:
        method = scope["method"]
        if is_steer_route(method, scope["path"]):
            if steering is None:
                return ERRORS.response(403, STEER_OFF)
            if not guard.secret_matches(guard.bearer(scope), steering.token()):
                return ERRORS.response(401, "missing or wrong steer token", {"WWW-Authenticate": "Bearer"})
            return scope
        if not guard.secret_matches(guard.bearer(scope), bearer()):
            return ERRORS.response(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        if method != "GET" and not _alias_route(method, scope["path"]):
            return ERRORS.response(405, f"method {method} is not allowed", {"Allow": "GET"})
        return scope

    return admit


def _alias_route(method: str, path: str) -> bool:
    """The one write the API takes: an agent's alias, from Liveboard's editor."""
    parts = path.split("/")
    return method == "PUT" and len(parts) == 5 and parts[1:3] == ["v1", "agents"] and parts[4] == "alias"


def file_bearer(path: Path) -> Callable[[], str]:
    """The bearer in ``path``, re-read when the file changes (rotation takes effect at
    once). A missing or empty file accepts nothing."""
    cached: dict[str, Any] = {"stamp": None, "value": ""}

    def current() -> str:
        try:
            info = path.stat()
            stamp = (info.st_mtime_ns, info.st_ino, info.st_size)
            if stamp != cached["stamp"]:
                cached["value"] = path.read_text().strip()
                cached["stamp"] = stamp
        except OSError:
            cached["stamp"], cached["value"] = None, ""
        value = str(cached["value"])
        # Never accept an empty secret: compare against something no header can be.
        return value or "\x00unset"

    return current


class ObserverApi:
    """The route handlers; each reads the store through its public methods only."""

    def __init__(
        self,
        store: HistoryStore,
        *,
        runtime_id: str,
        started_at: float,
        hub: EventHub | None,
        on_alias: Callable[[AgentRecord], None] | None,
        keepalive_s: float,
        secrets: SecretRegistry,
        steer: bool,
    ) -> None:
        self._steer = steer
        self._store = store
        self._secrets = secrets
        self._runtime_id = runtime_id
        self._started_at = started_at
        self._hub = hub
        self._on_alias = on_alias
        self._keepalive_s = keepalive_s
        self._timeline = timeline.TimelineReader(store)

    def status(self, request: Request) -> JSONResponse:
        agent_count, invocation_count = self._store.counts()
        return JSONResponse(
            {
                "schema_version": API_SCHEMA_VERSION,
                "api_version": API_VERSION,
                "runtime_id": self._runtime_id,
                "started_at": iso_utc(self._started_at),
                "agent_count": agent_count,
                "invocation_count": invocation_count,
                "sequence": self._hub.sequence if self._hub is not None else 0,
                "steer": self._steer,
            }
        )

    def agents(self, request: Request) -> JSONResponse:
        running = self._store.running_by_agent()
        entries = [
            agent_entry(agent, self._store.agent_workdirs(agent.agent_id), running)
            for agent in self._store.agents()
        ]
        return JSONResponse({"schema_version": API_SCHEMA_VERSION, "agents": entries})

    def agent(self, request: Request) -> JSONResponse:
        return JSONResponse(self._agent_entry(self._one_agent(request)))

    async def set_alias(self, request: Request) -> JSONResponse:
        agent = self._one_agent(request)
        body = await request.body()
        if len(body) > MAX_ALIAS_BODY:
            raise ApiError(413, f"the body must be at most {MAX_ALIAS_BODY} bytes")
        try:
            data = json.loads(body)
        except ValueError:
            raise ApiError(400, 'the body must be JSON: {"alias": "…"}') from None
        if not isinstance(data, dict) or set(data) != {"alias"}:
            raise ApiError(400, 'the body must be JSON: {"alias": "…"}')
        try:
            alias = clean_alias(data["alias"])
        except ProtocolError as exc:
            raise ApiError(400, exc.message) from None
        if alias is not None:
            alias = self._secrets.redact(alias)  # as set_agent_alias stores it: viewers read it
        updated = self._store.set_alias(agent.agent_id, alias)
        if self._on_alias is not None:
            self._on_alias(updated)
        return JSONResponse(self._agent_entry(updated))

    def invocations(self, request: Request) -> JSONResponse:
        params = request.query_params
        limit = query_int(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        found = self._store.invocations(
            last=limit + 1,
            agent_id=params.get("agent_id"),
            workdir=params.get("workdir"),
            before=position(params.get("cursor")),
        )
        found.reverse()
        page = found[:limit]
        more = len(found) > limit
        return JSONResponse(
            {
                "schema_version": API_SCHEMA_VERSION,
                "invocations": [invocation_summary(inv) for inv in page],
                "next_cursor": position_cursor(page[-1].started_at, page[-1].id) if more else None,
            }
        )

    def invocation(self, request: Request) -> JSONResponse:
        return JSONResponse(invocation_detail(self._one_invocation(request)))

    def output(self, request: Request) -> JSONResponse:
        inv = self._one_invocation(request)
        params = request.query_params
        view = parse_choice(params, "view", ("raw", "display"))
        limit = query_int(params, "limit", OUTPUT_DEFAULT_CHARS, 1, OUTPUT_MAX_CHARS)
        offset = 0
        if params.get("cursor"):
            payload = decode_cursor(params["cursor"], {"offset": int, "view": str})
            if payload["view"] != view or payload["offset"] < 0:
                raise ApiError(400, "cursor was made for another view; start again without one")
            offset = payload["offset"]
        handle = inv.session_handle
        if handle is None:
            raise ApiError(404, f"invocation {inv.id} has no session")
        text, _captured = self._store.output(handle)
        process = self._store.process(handle)
        ended = process is None or process["ended_at"] is not None
        if view == "display":
            # Offsets of a running session's display text can shift at its last line,
            # which a later carriage return may still overwrite.
            text = shown_text(text, ended=ended, secrets=self._secrets)
        end = min(len(text), offset + limit)
        piece = text[offset:end]
        at_end = end >= len(text)
        next_offset = max(offset, end)
        return JSONResponse(
            {
                "schema_version": API_SCHEMA_VERSION,
                "text": piece,
                "next_cursor": None
                if ended and at_end
                else encode_cursor({"offset": next_offset, "view": view}),
                "complete": ended and at_end,
                "output_incomplete_reason": process["output_incomplete_reason"] if process else None,
            }
        )

    def timeline(self, request: Request) -> JSONResponse:
        params = request.query_params
        limit = query_int(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        diffs = parse_choice(params, "diffs", ("full", "summary")) == "full"
        if params.get("before_ms") and params.get("recovery_since_ms"):
            raise ApiError(400, "give before_ms or recovery_since_ms, not both")
        agent_id, workdir = params.get("agent_id"), params.get("workdir")
        before = position(params.get("cursor"))
        if params.get("recovery_since_ms"):
            since_ms = query_int(params, "recovery_since_ms", 0, 0, MAX_MS)
            changed = self._timeline.changed_since(since_ms / 1000, agent_id=agent_id, workdir=workdir)
            records, next_cursor = page_after(changed, lambda r: r.key, params.get("cursor"), limit)
        else:
            if before is None and params.get("before_ms"):
                before = (query_int(params, "before_ms", 0, 0, MAX_MS) / 1000, "")
            records, more = self._timeline.page(
                agent_id=agent_id, workdir=workdir, before=before, limit=limit
            )
            last = records[-1].key if records else None
            next_cursor = position_cursor(*last) if more and last else None
        return JSONResponse(
            {
                "schema_version": API_SCHEMA_VERSION,
                "records": [
                    timeline.to_json(self._store, r, diffs=diffs, secrets=self._secrets) for r in records
                ],
                "next_cursor": next_cursor,
            }
        )

    def presentation(self, request: Request) -> JSONResponse:
        presentation_id = request.path_params["presentation_id"]
        diffs = parse_choice(request.query_params, "diffs", ("full", "summary"))
        record = _found(self._timeline.record(presentation_id), f"no timeline record {presentation_id}")
        return JSONResponse(
            timeline.to_json(self._store, record, diffs=diffs == "full", secrets=self._secrets)
        )

    async def events(self, request: Request) -> Response:
        if self._hub is None:
            raise ApiError(404, "this runtime publishes no events")
        params = request.query_params
        include_output = parse_choice(params, "include_output", ("true", "false")) == "true"
        output_agents = params.get("output_agent_ids")
        event_filter = EventFilter(
            agent_id=params.get("agent_id") or None,
            include_output=include_output,
            output_agent_ids=frozenset(a for a in output_agents.split(",") if a) if output_agents else None,
        )
        after = None
        last_id = request.headers.get("last-event-id")
        if last_id:
            try:
                after = int(last_id)
            except ValueError:
                raise ApiError(400, f"Last-Event-ID must be an event sequence, got {last_id!r}") from None
        subscription = self._hub.subscribe(event_filter, after=after)
        return StreamingResponse(
            self._stream(subscription),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )

    async def _stream(self, subscription: Subscription) -> AsyncIterator[bytes]:
        assert self._hub is not None
        try:
            # A first comment sends the headers at once: a client knows it is subscribed.
            yield b": connected\n\n"
            while not subscription.closed:
                events = await subscription.next_events(self._keepalive_s)
                if subscription.closed:  # closed by the hub during the await: mypy cannot see it
                    break  # type: ignore[unreachable]
                if events is None:
                    yield b": keepalive\n\n"
                else:
                    yield b"".join(event.frame for event in events)
        finally:
            self._hub.unsubscribe(subscription)

    def _agent_entry(self, agent: AgentRecord) -> dict[str, Any]:
        workdirs = self._store.agent_workdirs(agent.agent_id)
        return agent_entry(agent, workdirs, self._store.running_by_agent(agent.agent_id))

    def _one_agent(self, request: Request) -> AgentRecord:
        agent_id = request.path_params["agent_id"]
        return _found(self._store.agent(agent_id), f"no agent {agent_id}")

    def _one_invocation(self, request: Request) -> Invocation:
        invocation_id = request.path_params["invocation_id"]
        return _found(self._store.invocation(invocation_id), f"no invocation {invocation_id}")


def _found(item: T | None, missing: str) -> T:
    """What a path named, or the API's 404 saying what is missing."""
    if item is None:
        raise ApiError(404, missing)
    return item


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return ERRORS.response(exc.status_code, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "not found" if exc.status_code == 404 else str(exc.detail)
    return ERRORS.response(exc.status_code, message)


async def _history_error(request: Request, exc: Exception) -> Response:
    return ERRORS.response(503, str(exc))


def create_observer_app(
    store: HistoryStore,
    *,
    runtime_id: str,
    bearer_token: str | Callable[[], str],
    started_at: float,
    hub: EventHub | None = None,
    on_alias: Callable[[AgentRecord], None] | None = None,
    keepalive_s: float = KEEPALIVE_S,
    secrets: SecretRegistry = SECRETS,
    steering: Steering | None = None,
    watchers: Sequence[CallWatcher] = (),
) -> Starlette:
    """The observer API over ``store``; see the module docstring. ``bearer_token`` is the
    secret, or a function returning the current one (see :func:`file_bearer`); ``hub``
    serves ``/v1/events``; ``on_alias`` hears every alias set through the API; ``secrets``
    are redacted from the aliases it stores and from the cleaned views it builds;
    ``steering`` (``observer.steer``) opens the steer route, whose inputs ``watchers`` hear
    of as they are recorded."""
    if isinstance(bearer_token, str):
        if not bearer_token:
            raise ValueError("the observer needs a bearer token")
        fixed = bearer_token
        bearer: Callable[[], str] = lambda: fixed  # noqa: E731
    else:
        bearer = bearer_token
    api = ObserverApi(
        store,
        runtime_id=runtime_id,
        started_at=started_at,
        hub=hub,
        on_alias=on_alias,
        keepalive_s=keepalive_s,
        secrets=secrets,
        steer=steering is not None,
    )
    routes = [
        Route("/v1/status", api.status, methods=["GET"]),
        Route("/v1/agents", api.agents, methods=["GET"]),
        Route("/v1/agents/{agent_id}", api.agent, methods=["GET"]),
        Route("/v1/agents/{agent_id}/alias", api.set_alias, methods=["PUT"]),
        Route("/v1/invocations", api.invocations, methods=["GET"]),
        Route("/v1/invocations/{invocation_id}", api.invocation, methods=["GET"]),
        Route("/v1/invocations/{invocation_id}/output", api.output, methods=["GET"]),
        Route("/v1/timeline", api.timeline, methods=["GET"]),
        Route("/v1/timeline/{presentation_id}", api.presentation, methods=["GET"]),
        Route("/v1/events", api.events, methods=["GET"]),
    ]
    if steering is not None:
        steer = SteerRoute(steering, store, secrets, watchers)
        routes.append(Route("/v1/sessions/{handle}/input", steer.type_in, methods=["POST"]))
        routes.append(Route("/v1/sessions/{handle}/takeover", steer.take_over, methods=["POST"]))
    app = Starlette(
        routes=routes,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            HistoryUnavailable: _history_error,
        },
    )
    app.add_middleware(
        guard.ListenerGuard,
        name="observer",
        errors=ERRORS,
        admit=_admission(bearer, steering),
        always=[_NO_STORE],
        catch_errors=True,
    )
    return app
