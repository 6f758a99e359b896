"""A waiting call's progress note, worker → gateway (docs/protocol.md#cancel-and-progress)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zodex_protocol import messages
from zodex_protocol.bodies import BodyReader


@dataclass(frozen=True)
class ProgressNote:
    session: str  # the handle of the session the call waits on
    elapsed_ms: int  # how long its command has run
    new_chars: int  # characters of output the next result will carry, so far

    def to_body(self) -> dict[str, Any]:
        return {"session": self.session, "elapsed_ms": self.elapsed_ms, "new_chars": self.new_chars}

    @classmethod
    def from_body(cls, body: object) -> ProgressNote:
        read = BodyReader(body, messages.PROGRESS)
        return cls(read.text("session"), read.integer("elapsed_ms"), read.integer("new_chars"))

    def message(self) -> str:
        """What a client shows: ``session 3 running 12 s, 3,400 characters of new output``."""
        return (
            f"session {self.session} running {self.elapsed_ms // 1000} s, "
            f"{self.new_chars:,} characters of new output"
        )
