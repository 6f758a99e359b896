"""The bodies of the worker's replies (docs/protocol.md#requests-and-replies), typed.

The worker builds them and sends ``to_body()``; the gateway reads them back with
``from_body``, which refuses a body without the fields its type requires
(``BAD_REQUEST``, a protocol failure) and ignores keys it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from zodex_protocol import messages
from zodex_protocol.bodies import BodyReader, flat_body, read_flat
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.wait_pattern import OUTCOMES

STATUSES = ("running", "exited")
PATCH_OPERATIONS = ("created", "edited", "deleted", "renamed")


@dataclass(frozen=True)
class Pong:
    worker_id: str
    incarnation: int
    pid: int
    workdir: str
    live_sessions: int  # sessions whose command still runs

    @classmethod
    def from_body(cls, body: object) -> Pong:
        return read_flat(cls, body, messages.PONG)

    def to_body(self) -> dict[str, Any]:
        return flat_body(self)


@dataclass(frozen=True)
class SpilledOutput:
    """The fields of a stream that passed the inline limit (docs/output.md#spill-files).
    Without a spill file (it could not be made) only the counts, and why, are given."""

    output_chars: int
    output_lines: int
    output_file: str | None = None
    output_file_truncated: bool | None = None  # given with output_file
    output_file_error: str | None = None

    def fields(self) -> dict[str, Any]:
        given = {
            "output_file": self.output_file,
            "output_chars": self.output_chars,
            "output_lines": self.output_lines,
            "output_file_truncated": self.output_file_truncated,
            "output_file_error": self.output_file_error,
        }
        return {key: value for key, value in given.items() if value is not None}


@dataclass(frozen=True)
class TerminalScreen:
    """The screen of a full-screen program, as a terminal would show it (docs/output.md#screens)."""

    rows: tuple[str, ...]  # trailing spaces trimmed, trailing empty rows dropped
    cursor: tuple[int, int]  # row, column; from 0
    title: str
    alternate: bool  # the program is in the alternate screen
    size: tuple[int, int]  # the terminal's rows and columns

    def fields(self) -> dict[str, Any]:
        return {
            "rows": list(self.rows),
            "cursor": list(self.cursor),
            "title": self.title,
            "alternate": self.alternate,
            "size": list(self.size),
        }

    @classmethod
    def read(cls, read: BodyReader) -> TerminalScreen:
        cursor, size = read.integers("cursor", 2), read.integers("size", 2)
        return cls(
            rows=read.texts("rows"),
            cursor=(cursor[0], cursor[1]),
            title=read.text("title"),
            alternate=read.flag("alternate"),
            size=(size[0], size[1]),
        )


@dataclass(frozen=True)
class EvictedSession:
    """The session an ``exec`` ended to make room (docs/sessions.md#capacity-and-eviction)."""

    session_handle: str
    cmd: str


@dataclass(frozen=True)
class HumanInput:
    """What a person typed into the session since the model's last result
    (docs/tools.md#results): ``text`` is None when the terminal had echo off then."""

    at: str  # ISO-8601 UTC, milliseconds
    text: str | None
    hidden: bool

    def fields(self) -> dict[str, Any]:
        return {"at": self.at, "text": self.text, "hidden": self.hidden}

    @classmethod
    def read(cls, read: BodyReader) -> HumanInput:
        hidden = read.flag("hidden")
        text = read.optional_text("text")
        if hidden and text is not None:
            # Refused rather than passed on: hidden characters must never reach the model.
            raise ProtocolError(ErrorCode.BAD_REQUEST, "human_input: hidden input carries no text")
        return cls(at=read.text("at"), text=text, hidden=hidden)


@dataclass(frozen=True)
class PersonTyped:
    """The ``typed`` reply to ``person``: what was written, and whether the terminal hid it."""

    session_handle: str
    typed: HumanInput
    chars: int  # how many characters were written

    def to_body(self) -> dict[str, Any]:
        return {"session_handle": self.session_handle, "chars": self.chars, **self.typed.fields()}

    @classmethod
    def from_body(cls, body: object) -> PersonTyped:
        read = BodyReader(body, messages.TYPED)
        return cls(read.text("session_handle"), HumanInput.read(read), read.integer("chars"))


@dataclass(frozen=True)
class SessionResult:
    """The ``result`` of ``exec`` and ``write``: the tool result of docs/tools.md#results,
    plus the wire-only ``_session``. Optional fields are None here and absent on the wire."""

    summary: str
    status: str  # STATUSES
    output: str
    cwd: str
    wall_time_ms: int
    exit_code: int | None = None  # exited
    signal: str | None = None  # exited by a signal
    termination_reason: str | None = None  # exited: messages.TERMINATION_REASONS
    background_processes: int | None = None  # exited, once it left jobs behind
    session_handle: str | None = None  # running, or jobs left behind still run
    spilled: SpilledOutput | None = None
    screen: TerminalScreen | None = None  # a full-screen program's screen; output then says so
    evicted_session: EvictedSession | None = None
    # Given when the call had a wait_for (docs/tools.md#waiting-for-output): what ended its
    # wait (wait_pattern.OUTCOMES), and the text that matched.
    wait: str | None = None
    matched_text: str | None = None
    human_input: tuple[HumanInput, ...] = ()  # a person's input since the last result
    # True while a person has taken the session over; False in the first result after release.
    taken_over: bool | None = None
    # Wire-only, in an exec reply for a command that already ended (so it carries no
    # session_handle): the session it ran in, so history can link its output to the call.
    session: str | None = None

    def fields(self) -> dict[str, Any]:
        """The tool result, as the model gets it. The order is the one results have always
        had: the JSON text of a result stays byte-identical."""
        result: dict[str, Any] = {
            "summary": self.summary,
            "status": self.status,
            "output": self.output,
            "cwd": self.cwd,
            "wall_time_ms": self.wall_time_ms,
        }
        optional = {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "termination_reason": self.termination_reason,
            "background_processes": self.background_processes,
            "session_handle": self.session_handle,
        }
        result.update((key, value) for key, value in optional.items() if value is not None)
        if self.wait is not None:
            result["wait"] = self.wait
        if self.matched_text is not None:
            result["matched_text"] = self.matched_text
        if self.spilled is not None:
            result.update(self.spilled.fields())
        if self.screen is not None:
            result["screen"] = self.screen.fields()
        if self.evicted_session is not None:
            evicted = self.evicted_session
            result["evicted_session"] = {"session_handle": evicted.session_handle, "cmd": evicted.cmd}
        if self.human_input:
            result["human_input"] = [typed.fields() for typed in self.human_input]
        if self.taken_over is not None:
            result["taken_over"] = self.taken_over
        return result

    def to_body(self) -> dict[str, Any]:
        body = self.fields()
        if self.session is not None:
            body[messages.SESSION_KEY] = self.session
        return body

    def without_output(self) -> SessionResult:
        """A final result answered again (from a tombstone): the same fields, no new output."""
        return replace(
            self,
            output="",
            session=None,
            wait=None,
            matched_text=None,
            human_input=(),
            taken_over=None,
            screen=None,
        )

    def waited(self, wait: str | None, matched_text: str | None = None) -> SessionResult:
        """This result with the outcome of its call's wait_for; ``wait`` None: it had none."""
        return self if wait is None else replace(self, wait=wait, matched_text=matched_text)

    @classmethod
    def from_body(cls, body: object) -> SessionResult:
        read = BodyReader(body, messages.RESULT)
        spilled = None
        if read.has("output_chars"):
            spilled = SpilledOutput(
                output_chars=read.integer("output_chars"),
                output_lines=read.integer("output_lines"),
                output_file=read.optional_text("output_file"),
                output_file_truncated=read.optional_flag("output_file_truncated"),
                output_file_error=read.optional_text("output_file_error"),
            )
        evicted = read.optional_map("evicted_session")
        screen = read.optional_map("screen")
        status = read.choice("status", STATUSES)
        return cls(
            summary=read.text("summary"),
            status=status,
            output=read.text("output"),
            cwd=read.text("cwd"),
            wall_time_ms=read.integer("wall_time_ms"),
            exit_code=read.optional_integer("exit_code"),
            signal=read.optional_text("signal"),
            termination_reason=(
                read.choice("termination_reason", messages.TERMINATION_REASONS)
                if read.has("termination_reason")
                else None
            ),
            background_processes=read.optional_integer("background_processes"),
            session_handle=read.optional_text("session_handle"),
            spilled=spilled,
            screen=TerminalScreen.read(screen) if screen is not None else None,
            evicted_session=(
                EvictedSession(evicted.text("session_handle"), evicted.text("cmd")) if evicted else None
            ),
            wait=read.choice("wait", OUTCOMES) if read.has("wait") else None,
            matched_text=read.optional_text("matched_text"),
            human_input=tuple(HumanInput.read(typed) for typed in read.maps("human_input"))
            if read.has("human_input")
            else (),
            taken_over=read.optional_flag("taken_over"),
            session=read.optional_text(messages.SESSION_KEY),
        )


@dataclass(frozen=True)
class PatchedFile:
    """One file operation of an applied patch, as evidence (docs/apply_patch.md)."""

    operation: str  # PATCH_OPERATIONS
    path: str  # absolute (the destination of a rename)
    old_path: str | None  # the source of a rename, else None
    added: int  # lines
    removed: int
    diff: tuple[str, ...]  # unified diff rows, bounded by the worker


@dataclass(frozen=True)
class Patched:
    """The ``patched`` reply: whether the patch applied, the text for the model, the evidence."""

    ok: bool
    text: str
    files: tuple[PatchedFile, ...] = ()

    def to_body(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "text": self.text,
            "files": [
                {
                    "operation": f.operation,
                    "path": f.path,
                    "old_path": f.old_path,
                    "added": f.added,
                    "removed": f.removed,
                    "diff": list(f.diff),
                }
                for f in self.files
            ],
        }

    @classmethod
    def from_body(cls, body: object) -> Patched:
        read = BodyReader(body, messages.PATCHED)
        files = tuple(
            PatchedFile(
                operation=f.choice("operation", PATCH_OPERATIONS),
                path=f.text("path"),
                old_path=f.optional_text("old_path"),
                added=f.integer("added"),
                removed=f.integer("removed"),
                diff=f.texts("diff"),
            )
            for f in read.maps("files")
        )
        return cls(ok=read.flag("ok"), text=read.text("text"), files=files)
