"""A person's keystrokes, from a viewer, into a running session (docs/observer.md#a-person-types-into-a-session).

The characters go to the PTY as they are. Whether the terminal echoes them is read from
its ``termios`` flags at the moment of the write: with ``ECHO`` off (a password prompt)
nothing here keeps them, only their count. The model learns of every input in the next
result it gets for the session (``human_input``); nothing is logged.

A person's write does not take the session's lock: the model may be in a long poll on the
session, and that poll is exactly what the person's answer should end.

A person may also take a session over: until they give it back, the model's characters
are refused (its polls and kills are not), and its results say ``taken_over``; the first
result after the release says ``taken_over: false``, once.
"""

from __future__ import annotations

import termios
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

from zodex_protocol import messages
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.limits import Limits
from zodex_protocol.replies import HumanInput, PersonTyped, SessionResult
from zodex_protocol.requests import PersonInputRequest, TakeOverRequest
from zodex_worker.session import Session
from zodex_worker.sessions import SessionTable, Tombstone

# Inputs kept for a session until the model's next result; beyond this the oldest go.
MAX_PENDING: Final = 64


def echo_off(fd: int) -> bool:
    """Whether the terminal behind the PTY master ``fd`` has echo off (Linux reports the
    slave's settings on the master). A terminal whose flags cannot be read counts as
    hidden: when in doubt, keep the characters out."""
    try:
        return not termios.tcgetattr(fd)[3] & termios.ECHO
    except (termios.error, OSError):
        return True


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class PersonInputs:
    """Writes a person's input and holds what the model has not been told yet."""

    def __init__(self, table: SessionTable) -> None:
        self._table = table
        self._pending: dict[str, list[HumanInput]] = {}
        self._taken: set[str] = set()
        self._released: set[str] = set()  # given back since the model's last result

    def _running(self, handle: str, nothing: str) -> Session:
        found = self._table.find(handle)
        if found is None:
            raise ProtocolError(ErrorCode.UNKNOWN_HANDLE, f"Unknown session handle: {handle}")
        if isinstance(found, Tombstone) or not found.running:
            raise ProtocolError(
                ErrorCode.INVALID_ARGUMENT, f"the command in session {handle} has ended; {nothing}"
            )
        return found

    async def type(self, request: PersonInputRequest) -> PersonTyped:
        handle = request.session_handle
        found = self._running(handle, "nothing was typed")
        hidden = echo_off(found.terminal.fd)
        await found.type(request.chars.encode("utf-8", "surrogatepass"))
        typed = HumanInput(at=_now_iso(), text=None if hidden else request.chars, hidden=hidden)
        self._remember(handle, typed)
        return PersonTyped(session_handle=handle, typed=typed, chars=len(request.chars))

    def take_over(self, request: TakeOverRequest) -> dict[str, object]:
        handle = request.session_handle
        if request.taken:
            self._running(handle, "there is nothing to take over")
            self._taken.add(handle)
            self._released.discard(handle)
        elif handle in self._taken:
            self._taken.discard(handle)
            self._released.add(handle)
        self._forget_gone()
        return {"session_handle": handle, "taken": handle in self._taken}

    def refuse_model_chars(self, handle: str) -> None:
        """The model's characters, refused while a person holds the session."""
        if handle in self._taken:
            raise ProtocolError(
                ErrorCode.INVALID_ARGUMENT,
                f"a person has taken over session {handle}; poll it to watch (no characters)",
            )

    def attach(self, handle: str, result: SessionResult) -> SessionResult:
        """``result`` for the session ``handle``, with the inputs the model was not told of
        yet, and whether a person holds it (or just gave it back)."""
        pending = self._pending.pop(handle, None)
        if pending:
            result = replace(result, human_input=(*result.human_input, *pending))
        if handle in self._taken:
            summary = f"{result.summary}; a person has taken over this session: poll to watch"
            return replace(result, taken_over=True, summary=summary)
        if handle in self._released:
            self._released.discard(handle)
            summary = f"{result.summary}; a person gave this session back: you may type again"
            return replace(result, taken_over=False, summary=summary)
        return result

    def _remember(self, handle: str, typed: HumanInput) -> None:
        self._forget_gone()
        pending = self._pending.setdefault(handle, [])
        pending.append(typed)
        del pending[:-MAX_PENDING]

    def _forget_gone(self) -> None:
        """Sessions that are gone (tombstones expired) let go of what was kept for them."""
        known = {*self._pending, *self._taken, *self._released}
        for handle in [h for h in known if self._table.find(h) is None]:
            self._pending.pop(handle, None)
            self._taken.discard(handle)
            self._released.discard(handle)


PersonHandler = Callable[[dict[str, Any]], Awaitable[tuple[str, Any]]]


def person_handlers(person: PersonInputs, limits: Limits) -> dict[str, PersonHandler]:
    """The worker's handlers for a person's requests, by message type (server.py's table)."""

    async def on_person(body: dict[str, Any]) -> tuple[str, Any]:
        request = PersonInputRequest.from_body(body, limits)
        return messages.TYPED, (await person.type(request)).to_body()

    async def on_take_over(body: dict[str, Any]) -> tuple[str, Any]:
        return messages.TAKEN_OVER, person.take_over(TakeOverRequest.from_body(body))

    return {messages.PERSON: on_person, messages.TAKE_OVER: on_take_over}
