"""The observer's routes that act on a session: a person's keystrokes, from Liveboard, and
taking a session over (docs/observer.md#a-person-types-into-a-session).

They exist only with ``observer.steer = true``, and take only the steer token — never the
read-only bearer, which every other viewer holds. The worker writes the characters to the
session's PTY and says whether the terminal had echo off; then this records the input in
history (``by: person``): as typed, or, hidden, as ``[a person typed N hidden
characters]``. The characters of hidden input are kept by no one on this side: not in
history, the events, the log, or the reply.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse

from zodex_gateway.history import HistoryStore, HistoryUnavailable
from zodex_gateway.observer.paging import ApiError
from zodex_gateway.observer.views import API_SCHEMA_VERSION
from zodex_gateway.redaction import SecretRegistry
from zodex_gateway.workers.supervisor import Supervisor
from zodex_protocol import messages
from zodex_protocol.bodies import BodyReader
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.limits import Limits
from zodex_protocol.replies import PersonTyped, SessionResult
from zodex_protocol.requests import PersonInputRequest, TakeOverRequest

log = logging.getLogger("zodex.gateway")

# JSON escapes can make a body up to six times its characters, plus the key.
BODY_FACTOR: Final = 6
BODY_SLACK: Final = 256
REQUEST_TIMEOUT_S: Final = 30.0
# The routes' paths: /v1/sessions/{handle}/input and /v1/sessions/{handle}/takeover.
ROUTE_ENDS: Final = ("input", "takeover")
TAKE_OVER_BODY: Final = 64

_Request = TypeVar("_Request")
_Reply = TypeVar("_Reply")


class SessionSteer(Protocol):
    """The way to the worker that owns a session."""

    async def type_in(self, request: PersonInputRequest) -> PersonTyped: ...

    async def take_over(self, request: TakeOverRequest) -> bool: ...


class CallWatcher(Protocol):
    """Hears a call recorded in history (the observer's feed publishes it)."""

    def call_started(self, invocation_id: str) -> None: ...

    def call_completed(self, invocation_id: str) -> None: ...


def hidden_placeholder(count: int) -> str:
    noun = "character" if count == 1 else "characters"
    return f"[a person typed {count} hidden {noun}]"


def is_steer_route(method: str, path: str) -> bool:
    parts = path.split("/")[1:]
    return method == "POST" and len(parts) == 4 and parts[:2] == ["v1", "sessions"] and parts[3] in ROUTE_ENDS


class SupervisorSteer:
    """Sends a person's requests to the worker that owns the session."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    async def _ask(self, handle: str, nothing: str, type: str, body: dict[str, Any]) -> Any:
        target = await self._supervisor.route_handle(handle)
        if isinstance(target, SessionResult):  # the tombstone of an incarnation that exited
            raise ProtocolError(
                ErrorCode.INVALID_ARGUMENT, f"the command in session {handle} has ended; {nothing}"
            )
        return await target.request(type, body, REQUEST_TIMEOUT_S)

    async def type_in(self, request: PersonInputRequest) -> PersonTyped:
        body = await self._ask(
            request.session_handle, "nothing was typed", messages.PERSON, request.to_body()
        )
        return PersonTyped.from_body(body)

    async def take_over(self, request: TakeOverRequest) -> bool:
        nothing = "there is nothing to take over"
        body = await self._ask(request.session_handle, nothing, messages.TAKE_OVER, request.to_body())
        return BodyReader(body, messages.TAKEN_OVER).flag("taken")


@dataclass(frozen=True)
class Steering:
    """What the steer routes need: the current token, and the way to the workers."""

    token: Callable[[], str]
    workers: SessionSteer
    limits: Limits


class SteerRoute:
    def __init__(
        self,
        steering: Steering,
        store: HistoryStore,
        secrets: SecretRegistry,
        watchers: Sequence[CallWatcher],
    ) -> None:
        self._steering = steering
        self._store = store
        self._secrets = secrets
        self._watchers = watchers

    async def type_in(self, request: Request) -> JSONResponse:
        handle = request.path_params["handle"]
        chars = await self._chars(request)
        typed = await _steer(
            lambda: PersonInputRequest.from_body(
                {"session_handle": handle, "chars": chars}, self._steering.limits
            ),
            self._steering.workers.type_in,
        )
        recorded, problem = self._record(typed, chars)
        return JSONResponse(
            {
                "schema_version": API_SCHEMA_VERSION,
                "session_handle": typed.session_handle,
                "at": typed.typed.at,
                "chars": typed.chars,
                "hidden": typed.typed.hidden,
                "recorded": recorded,
                "history_error": problem,
            }
        )

    async def take_over(self, request: Request) -> JSONResponse:
        handle = request.path_params["handle"]
        taken = await _json_field(request, "taken", bool, '{"taken": true|false}', TAKE_OVER_BODY)
        held = await _steer(
            lambda: TakeOverRequest.from_body({"session_handle": handle, "taken": taken}),
            self._steering.workers.take_over,
        )
        log.info("a person %s session %s", "took over" if held else "gave back", handle)
        return JSONResponse(
            {"schema_version": API_SCHEMA_VERSION, "session_handle": handle, "taken_over": held}
        )

    async def _chars(self, request: Request) -> str:
        limit = self._steering.limits.max_chars_chars * BODY_FACTOR + BODY_SLACK
        chars: str = await _json_field(request, "chars", str, '{"chars": "…"}', limit)
        return chars

    def _record(self, typed: PersonTyped, chars: str) -> tuple[bool, str | None]:
        """History's row for the input, in the column of the session's creator. Recorded
        once typed: only the worker knows whether the terminal hid it."""
        hidden = typed.typed.hidden
        shown = hidden_placeholder(typed.chars) if hidden else self._secrets.redact(chars)
        handle = typed.session_handle
        try:
            process = self._store.process(handle)
            creator = self._store.invocation(process["creator_invocation_id"]) if process else None
            invocation = self._store.begin(
                agent_id=creator.agent_id if creator else None,
                tool_name="write_stdin",
                args={"session_handle": handle, "chars": shown},
                declared_workdir=creator.declared_workdir if creator else None,
                real_workdir=creator.real_workdir if creator else None,
                session_handle=handle,
                by_person=True,
            )
            for watcher in self._watchers:
                watcher.call_started(invocation)
            result: dict[str, Any] = {
                "summary": shown if hidden else f"a person typed {json.dumps(shown, ensure_ascii=False)}",
                "human_input": {"at": typed.typed.at, "text": None if hidden else shown, "hidden": hidden},
            }
            self._store.complete(invocation, ok=True, result=result)
            for watcher in self._watchers:
                watcher.call_completed(invocation)
        except HistoryUnavailable as exc:
            # Never the characters: only that an input was not recorded, and why.
            log.warning("a person's input into session %s was typed but not recorded: %s", handle, exc.cause)
            return False, str(exc)
        return True, None


async def _json_field(request: Request, name: str, kind: type, shape: str, limit: int) -> Any:
    """The one field of a JSON body ``{name: <kind>}`` of at most ``limit`` bytes."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise ApiError(415, f"send {shape} as application/json")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"the body must be at most {limit} bytes")
    try:
        data = json.loads(body)
    except ValueError:
        raise ApiError(400, f"the body must be JSON: {shape}") from None
    if not isinstance(data, dict) or set(data) != {name} or not isinstance(data[name], kind):
        raise ApiError(400, f"the body must be JSON: {shape}")
    return data[name]


async def _steer(build: Callable[[], _Request], send: Callable[[_Request], Awaitable[_Reply]]) -> _Reply:
    """The worker's answer to the request ``build`` makes: a request the protocol refuses
    is the person's mistake (400); the worker's refusal is mapped by :func:`_status_of`."""
    try:
        wanted = build()
    except ProtocolError as exc:
        raise ApiError(400, exc.message) from None
    try:
        return await send(wanted)
    except ProtocolError as exc:
        raise ApiError(_status_of(exc), exc.message) from None


def _status_of(exc: ProtocolError) -> int:
    if exc.code in (ErrorCode.UNKNOWN_HANDLE, ErrorCode.SESSION_LOST):
        return 404
    if exc.code == ErrorCode.INVALID_ARGUMENT:
        return 409  # the request was checked already: the session cannot take input now
    if exc.code == ErrorCode.STOPPING:
        return 503
    return 502
