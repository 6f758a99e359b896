"""Stable numeric error codes and the one exception type that crosses the wire.

Codes never change meaning once released; add new ones at the end of their range.
1xx: the message itself was unusable. 2xx: the request was understood but refused.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ErrorCode(IntEnum):
    # 1xx — protocol failures: the peer or the transport is broken.
    MALFORMED = 100  # not a decodable envelope
    BAD_SIGNATURE = 101  # HMAC did not verify
    REPLAYED = 102  # message id seen before, or timestamp outside the window
    VERSION_MISMATCH = 103  # peer speaks another protocol version
    UNKNOWN_TYPE = 104  # no handler for this message type
    BAD_REQUEST = 105  # body does not have the fields the type requires
    INTERNAL = 106  # the handler failed unexpectedly
    WORKER_LOST = 107  # the worker died with the request in flight

    # 2xx — tool-level refusals the model can act on (become isError results).
    INVALID_ARGUMENT = 200  # bad workdir, empty cmd, oversized field …
    UNKNOWN_HANDLE = 201  # never issued or expired
    SESSION_LOST = 202  # the worker that owned the session died
    CAPACITY = 203  # too many live sessions in this worker
    STOPPING = 204  # the runtime or worker is shutting down
    SPAWN_FAILED = 205  # the command could not be started
    WORKER_UNAVAILABLE = 206  # no worker could be started for this workdir


# A stop has begun: the one message of ErrorCode.STOPPING for a new call, gateway or worker.
STOPPING_MESSAGE = "runtime is stopping; new tool calls are not accepted"

TOOL_LEVEL_CODES = frozenset(code for code in ErrorCode if 200 <= code < 300)


class ProtocolError(Exception):
    """An error with a stable code and a one-line message meant for the end reader."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def is_tool_level(self) -> bool:
        return self.code in TOOL_LEVEL_CODES

    def to_wire(self) -> dict[str, Any]:
        return {"code": int(self.code), "message": self.message}

    @classmethod
    def from_wire(cls, body: Any) -> ProtocolError:
        try:
            code = ErrorCode(int(body["code"]))
            message = str(body["message"])
        except (KeyError, TypeError, ValueError):
            return cls(ErrorCode.MALFORMED, f"unreadable error reply: {body!r}")
        return cls(code, message)

    def __repr__(self) -> str:
        return f"ProtocolError({self.code.name}, {self.message!r})"
