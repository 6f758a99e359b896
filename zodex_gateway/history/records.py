"""What history hands out: frozen records, and the one error a caller must handle."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NotRequired, TypedDict

PENDING: Final = "pending"
OK: Final = "ok"
ERROR: Final = "error"
INCOMPLETE: Final = "incomplete"
BY_MODEL: Final = "model"
BY_PERSON: Final = "person"

RUNTIME_STOPPED: Final = "runtime stopped before the call completed"
PROCESS_LOST: Final = "lost"
OUTPUT_LOST: Final = "runtime stopped before the command ended; later output was not recorded"
# A command whose every call the size limit removed while it ran: its output so far is gone,
# and what it prints is not stored until a call refers to it again.
OUTPUT_TRIMMED: Final = (
    "history reached its size limit: the calls and output of this running command were removed"
)


class HistoryUnavailable(Exception):
    """History cannot read or write; the message is one line, fit to show the model.

    ``cause`` is the underlying failure alone (e.g. ``database or disk is full``), for a
    caller that words its own line around it."""

    def __init__(self, message: str, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause if cause is not None else message


@dataclass(frozen=True)
class AgentRecord:
    agent_id: str
    alias: str | None
    first_seen: float
    last_seen: float


@dataclass(frozen=True)
class FileChange:
    """One file operation of an ``apply_patch`` call, as evidence."""

    operation: str  # "add" | "delete" | "update" | "move", as the patch applier names them
    path: str
    old_path: str | None
    added: int
    removed: int
    diff: tuple[str, ...]


class CallStart(TypedDict):
    """A call as recorded before it runs (:meth:`HistoryStore.begin`)."""

    agent_id: str | None
    tool_name: str
    args: dict[str, Any]
    declared_workdir: str | None
    real_workdir: str | None
    session_handle: NotRequired[str | None]  # write_stdin: the session it targets
    by_person: NotRequired[bool]  # a person's input from a viewer, never a tool call


class CallOutcome(TypedDict):
    """A call's outcome (:meth:`HistoryStore.complete`)."""

    ok: bool
    result: Any
    error: NotRequired[str | None]
    session_handle: NotRequired[str | None]  # exec_command: the session it created
    files: NotRequired[Sequence[FileChange]]


class ProcessStart(TypedDict):
    pid: int
    cmd: str
    cwd: str
    started_at: float
    invocation_id: NotRequired[str | None]  # the exec call that started it, when the worker echoes it


class ProcessEnd(TypedDict):
    exit_code: int
    signal: str | None
    reason: str
    ended_at: float


@dataclass(frozen=True)
class Invocation:
    id: str
    agent_id: str | None
    tool_name: str
    args: dict[str, Any]
    declared_workdir: str | None
    real_workdir: str | None
    status: str  # PENDING | OK | ERROR | INCOMPLETE
    started_at: float
    duration_ms: int | None
    result: Any | None  # exactly as returned to the model: dict (structured) or str (text)
    error: str | None
    session_handle: str | None  # created (exec_command) or targeted (write_stdin)
    handle_creator: str | None  # write_stdin: the agent that created the targeted session
    cross_agent: bool  # write_stdin: the caller is not the session's creator
    incomplete_reason: str | None
    files: tuple[FileChange, ...]
    by_person: bool = False  # a person typed it from a viewer (docs/history.md#who-typed)

    @property
    def by(self) -> str:
        """Who made the call: BY_MODEL or BY_PERSON."""
        return BY_PERSON if self.by_person else BY_MODEL
