"""The observer's HTTP app: read-only JSON over the history store, behind a bearer.

One ASGI guard wraps everything: it answers OPTIONS and every other non-GET with 405, a
missing or wrong bearer with 401, turns any unexpected failure into a JSON 500, and puts
``Cache-Control: no-store`` on every response. No CORS headers are ever sent, so a
browser page of another origin can neither read nor preflight the API.
"""

from __future__ import annotations

import hmac
import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from zodex_gateway.history import HistoryStore, HistoryUnavailable, Invocation
from zodex_gateway.observer import timeline
from zodex_gateway.observer.paging import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ApiError,
    decode_cursor,
    encode_cursor,
    page_after,
    parse_choice,
    parse_int,
)
from zodex_gateway.observer.views import (
    API_VERSION,
    SCHEMA_VERSION,
    agent_entry,
    invocation_detail,
    invocation_key,
    invocation_summary,
    iso_utc,
    newest_first,
)
from zodex_worker.output import TerminalCleaner

log = logging.getLogger("zodex.gateway")

OUTPUT_DEFAULT_CHARS = 65536
OUTPUT_MAX_CHARS = 1024 * 1024
_NO_STORE = (b"cache-control", b"no-store")


def error_response(status_code: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"schema_version": SCHEMA_VERSION, "error": message}, status_code=status_code, headers=headers
    )


class _Guard:
    """Method, bearer, no-store and last-resort errors, before any route runs."""

    def __init__(self, app: ASGIApp, bearer_token: str) -> None:
        self._app = app
        self._expected = f"Bearer {bearer_token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = False

        async def send_no_store(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [h for h in message.get("headers", []) if h[0].lower() != _NO_STORE[0]]
                message = {**message, "headers": [*headers, _NO_STORE]}
            await send(message)

        request = Request(scope)
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, self._expected):
            reply: Response = error_response(
                401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"}
            )
        elif scope["method"] != "GET":
            reply = error_response(405, f"method {scope['method']} is not allowed", {"Allow": "GET"})
        else:
            try:
                await self._app(scope, receive, send_no_store)
                return
            except Exception:
                log.exception("observer request failed: %s", scope.get("path"))
                if started:
                    raise
                reply = error_response(500, "internal error")
        await reply(scope, receive, send_no_store)


class ObserverApi:
    """The route handlers; each reads the store through its public methods only."""

    def __init__(self, store: HistoryStore, *, runtime_id: str, started_at: float) -> None:
        self._store = store
        self._runtime_id = runtime_id
        self._started_at = started_at

    def status(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "schema_version": SCHEMA_VERSION,
                "api_version": API_VERSION,
                "runtime_id": self._runtime_id,
                "started_at": iso_utc(self._started_at),
                "agent_count": len(self._store.agents()),
                "invocation_count": len(self._store.invocations()),
            }
        )

    def agents(self, request: Request) -> JSONResponse:
        by_agent: dict[str, list[Invocation]] = {}
        for inv in newest_first(self._store.invocations()):
            if inv.agent_id is not None:
                by_agent.setdefault(inv.agent_id, []).append(inv)
        entries = [
            agent_entry(self._store, agent, by_agent.get(agent.agent_id, []))
            for agent in self._store.agents()
        ]
        return JSONResponse({"schema_version": SCHEMA_VERSION, "agents": entries})

    def agent(self, request: Request) -> JSONResponse:
        agent_id = request.path_params["agent_id"]
        agent = self._store.agent(agent_id)
        if agent is None:
            raise ApiError(404, f"no agent {agent_id}")
        invocations = newest_first(self._store.invocations(agent_id=agent_id))
        return JSONResponse(agent_entry(self._store, agent, invocations))

    def invocations(self, request: Request) -> JSONResponse:
        params = request.query_params
        limit = parse_int(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        found = newest_first(
            self._store.invocations(agent_id=params.get("agent_id"), workdir=params.get("workdir"))
        )
        page, next_cursor = page_after(found, invocation_key, params.get("cursor"), limit)
        return JSONResponse(
            {
                "schema_version": SCHEMA_VERSION,
                "invocations": [invocation_summary(inv) for inv in page],
                "next_cursor": next_cursor,
            }
        )

    def invocation(self, request: Request) -> JSONResponse:
        return JSONResponse(invocation_detail(self._one_invocation(request)))

    def output(self, request: Request) -> JSONResponse:
        inv = self._one_invocation(request)
        params = request.query_params
        view = parse_choice(params, "view", ("raw", "display"))
        limit = parse_int(params, "limit", OUTPUT_DEFAULT_CHARS, 1, OUTPUT_MAX_CHARS)
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
        if view == "display":
            # Offsets of a running session's display text can shift at its last line,
            # which a later carriage return may still overwrite.
            cleaner = TerminalCleaner()
            text = cleaner.feed(text) + cleaner.finish()
        process = self._store.process(handle)
        ended = process is None or process["ended_at"] is not None
        end = min(len(text), offset + limit)
        piece = text[offset:end]
        at_end = end >= len(text)
        next_offset = max(offset, end)
        return JSONResponse(
            {
                "schema_version": SCHEMA_VERSION,
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
        limit = parse_int(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        before_ms = parse_int(params, "before_ms", -1, 0, 2**53) if params.get("before_ms") else None
        diffs = parse_choice(params, "diffs", ("full", "summary"))
        records = timeline.select(
            timeline.build(self._store.invocations()),
            agent_id=params.get("agent_id"),
            workdir=params.get("workdir"),
            before_ms=before_ms,
        )
        page, next_cursor = page_after(records, lambda r: r.key, params.get("cursor"), limit)
        return JSONResponse(
            {
                "schema_version": SCHEMA_VERSION,
                "records": [timeline.to_json(self._store, r, diffs=diffs == "full") for r in page],
                "next_cursor": next_cursor,
            }
        )

    def presentation(self, request: Request) -> JSONResponse:
        presentation_id = request.path_params["presentation_id"]
        diffs = parse_choice(request.query_params, "diffs", ("full", "summary"))
        for record in timeline.build(self._store.invocations()):
            if record.presentation_id == presentation_id:
                return JSONResponse(timeline.to_json(self._store, record, diffs=diffs == "full"))
        raise ApiError(404, f"no timeline record {presentation_id}")

    def _one_invocation(self, request: Request) -> Invocation:
        invocation_id = request.path_params["invocation_id"]
        found = self._store.invocations(invocation_id=invocation_id)
        if not found:
            raise ApiError(404, f"no invocation {invocation_id}")
        return found[0]


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status_code, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "not found" if exc.status_code == 404 else str(exc.detail)
    return error_response(exc.status_code, message)


async def _history_error(request: Request, exc: Exception) -> Response:
    return error_response(503, str(exc))


def create_observer_app(
    store: HistoryStore, *, runtime_id: str, bearer_token: str, started_at: float
) -> Starlette:
    """The read-only observer API over ``store``; see the module docstring."""
    if not bearer_token:
        raise ValueError("the observer needs a bearer token")
    api = ObserverApi(store, runtime_id=runtime_id, started_at=started_at)
    routes = [
        Route("/v1/status", api.status, methods=["GET"]),
        Route("/v1/agents", api.agents, methods=["GET"]),
        Route("/v1/agents/{agent_id}", api.agent, methods=["GET"]),
        Route("/v1/invocations", api.invocations, methods=["GET"]),
        Route("/v1/invocations/{invocation_id}", api.invocation, methods=["GET"]),
        Route("/v1/invocations/{invocation_id}/output", api.output, methods=["GET"]),
        Route("/v1/timeline", api.timeline, methods=["GET"]),
        Route("/v1/timeline/{presentation_id}", api.presentation, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            HistoryUnavailable: _history_error,
        },
    )
    app.add_middleware(_Guard, bearer_token=bearer_token)
    return app
