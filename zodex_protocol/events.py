"""The worker's events (docs/protocol.md#events-xpub), typed.

The worker builds them and publishes ``to_body()`` under ``TYPE``; every reader in the
gateway (history's capture, and through it the observer's feed) gets them from
:func:`decode_event`, so a field means the same thing, with the same defaults, everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from zodex_protocol import messages
from zodex_protocol.bodies import BodyReader, flat_body, read_flat
from zodex_protocol.errors import ErrorCode, ProtocolError


@dataclass(frozen=True)
class OutputEvent:
    TYPE: ClassVar[str] = messages.EVENT_OUTPUT

    session: str  # the session handle
    # Numbers a session's output events from 1, so a reader can tell it missed some. None
    # only for text a reader made itself (the end a redactor held back), never on the wire.
    seq: int | None
    text: str  # raw decoded text, escapes intact

    def to_body(self) -> dict[str, Any]:
        return {"session": self.session, "seq": self.seq, "text": self.text}

    @classmethod
    def from_body(cls, body: object) -> OutputEvent:
        read = BodyReader(body, cls.TYPE)
        return cls(session=read.text("session"), seq=read.integer("seq"), text=read.text("text"))


@dataclass(frozen=True)
class ProcessStarted:
    TYPE: ClassVar[str] = messages.EVENT_PROCESS_STARTED

    session: str
    pid: int
    cmd: str
    cwd: str
    started_at: float  # Unix time, seconds
    tag: str | None = None  # the exec request's ``_tag``: the call that started it

    def to_body(self) -> dict[str, Any]:
        return flat_body(self)

    @classmethod
    def from_body(cls, body: object) -> ProcessStarted:
        return read_flat(cls, body, cls.TYPE)


@dataclass(frozen=True)
class ProcessEnded:
    TYPE: ClassVar[str] = messages.EVENT_PROCESS_ENDED

    session: str
    exit_code: int  # -1 when ended by a signal
    signal: str | None  # e.g. SIGKILL
    reason: str  # "exit" | "timeout" | "killed"
    ended_at: float  # Unix time, seconds
    background: int  # jobs left behind, still running
    output_events: int  # the session's last output ``seq`` (0: none)

    def to_body(self) -> dict[str, Any]:
        return flat_body(self)

    @classmethod
    def from_body(cls, body: object) -> ProcessEnded:
        return read_flat(cls, body, cls.TYPE, reason=messages.TERMINATION_REASONS)


WorkerEvent = OutputEvent | ProcessStarted | ProcessEnded

_DECODERS = {kind.TYPE: kind.from_body for kind in (OutputEvent, ProcessStarted, ProcessEnded)}


def decode_event(event_type: str, body: object) -> WorkerEvent:
    """One event from its envelope's type and body; raises ProtocolError if it is not one."""
    decode = _DECODERS.get(event_type)
    if decode is None:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown event type: {event_type}")
    return decode(body)
