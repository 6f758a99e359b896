"""The bodies of the gateway's requests (docs/protocol.md#requests-and-replies), typed.

Each is read once, with the argument rules of docs/tools.md#argument-rules: by the gateway
from a tool call's arguments (``from_args``, before routing) and by the worker from the
wire (``from_body``). ``to_body`` is what the gateway sends. A field left out takes the
documented default where the worker applies it (the yields and the timeout are clamped by
``Limits`` there), so ``None`` means "not given".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zodex_protocol import messages
from zodex_protocol.bodies import body_map
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import MAX_HANDLE_CHARS
from zodex_protocol.limits import Limits
from zodex_protocol.validation import (
    CheckedWorkdir,
    check_exec_args,
    check_length,
    check_patch_args,
    check_type,
    check_write_args,
)
from zodex_protocol.wait_pattern import WaitPattern


def _given(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _wait_for(args: Mapping[str, Any]) -> WaitPattern | None:
    """The optional ``wait_for``, checked after the tool's other arguments (its type with them)."""
    source = args.get("wait_for")
    return None if source is None else WaitPattern.compile(source)


@dataclass(frozen=True)
class ExecRequest:
    cmd: str
    workdir: str  # as given: the command starts there
    # The workdir's real path, resolved by whoever read the request; never sent.
    real_workdir: str = field(compare=False)
    yield_time_ms: int | None = None
    timeout_ms: int | None = None
    # The call's history id, echoed in process_started (docs/protocol.md); wire key ``_tag``.
    tag: str | None = None
    wait_for: WaitPattern | None = None

    @classmethod
    def from_args(
        cls,
        args: Mapping[str, Any],
        limits: Limits,
        *,
        tag: str | None = None,
        workdir: CheckedWorkdir | None = None,
    ) -> ExecRequest:
        """exec_command's arguments. A model's own ``_tag`` is not one of them: ignored.
        ``workdir``: the workdir's check, when the caller already made it."""
        real = check_exec_args(args, limits, workdir)
        return cls(
            cmd=args["cmd"],
            workdir=args["workdir"],
            real_workdir=real,
            yield_time_ms=args.get("yield_time_ms"),
            timeout_ms=args.get("timeout_ms"),
            tag=tag,
            wait_for=_wait_for(args),
        )

    @classmethod
    def from_body(cls, body: object, limits: Limits) -> ExecRequest:
        args = body_map(body, messages.EXEC)
        tag = check_type(args, messages.EXEC_TAG, str, required=False)
        if tag is not None:
            check_length(messages.EXEC_TAG, tag, messages.MAX_TAG_CHARS)
        return cls.from_args(args, limits, tag=tag)

    def to_body(self) -> dict[str, Any]:
        return _given(
            cmd=self.cmd,
            workdir=self.workdir,
            yield_time_ms=self.yield_time_ms,
            timeout_ms=self.timeout_ms,
            wait_for=None if self.wait_for is None else self.wait_for.source,
            **{messages.EXEC_TAG: self.tag},
        )


@dataclass(frozen=True)
class WriteRequest:
    session_handle: str
    chars: str = ""  # empty: a poll
    yield_time_ms: int | None = None
    kill_process: bool = False
    wait_for: WaitPattern | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, Any], limits: Limits) -> WriteRequest:
        handle = check_write_args(args, limits)
        return cls(
            session_handle=handle,
            chars=args.get("chars") or "",
            yield_time_ms=args.get("yield_time_ms"),
            kill_process=bool(args.get("kill_process", False)),
            wait_for=_wait_for(args),
        )

    @classmethod
    def from_body(cls, body: object, limits: Limits) -> WriteRequest:
        return cls.from_args(body_map(body, messages.WRITE), limits)

    def to_body(self) -> dict[str, Any]:
        return _given(
            session_handle=self.session_handle,
            chars=self.chars or None,
            yield_time_ms=self.yield_time_ms,
            kill_process=self.kill_process or None,
            wait_for=None if self.wait_for is None else self.wait_for.source,
        )


@dataclass(frozen=True)
class PatchRequest:
    patch: str
    workdir: str  # as given: relative paths in the patch resolve against it
    real_workdir: str = field(compare=False)  # resolved by whoever read the request; never sent

    @classmethod
    def from_args(
        cls, args: Mapping[str, Any], limits: Limits, *, workdir: CheckedWorkdir | None = None
    ) -> PatchRequest:
        real = check_patch_args(args, limits, workdir)
        return cls(patch=args["patch"], workdir=args["workdir"], real_workdir=real)

    @classmethod
    def from_body(cls, body: object, limits: Limits) -> PatchRequest:
        return cls.from_args(body_map(body, messages.PATCH), limits)

    def to_body(self) -> dict[str, Any]:
        return {"patch": self.patch, "workdir": self.workdir}


@dataclass(frozen=True)
class PersonInputRequest:
    """A person's keystrokes for a running session, from a viewer (never from a model):
    the same bounds as ``write_stdin``'s ``chars``, and never empty."""

    session_handle: str
    chars: str

    @classmethod
    def from_body(cls, body: object, limits: Limits) -> PersonInputRequest:
        args = body_map(body, messages.PERSON)
        handle = check_type(args, "session_handle", str, required=True)
        chars = check_type(args, "chars", str, required=True)
        check_length("session_handle", handle, MAX_HANDLE_CHARS)
        if not chars:
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, "chars must not be empty")
        check_length("chars", chars, limits.max_chars_chars)
        return cls(session_handle=handle, chars=chars)

    def to_body(self) -> dict[str, Any]:
        return {"session_handle": self.session_handle, "chars": self.chars}


@dataclass(frozen=True)
class TakeOverRequest:
    """A person takes over a running session (``taken``), or gives it back."""

    session_handle: str
    taken: bool

    @classmethod
    def from_body(cls, body: object) -> TakeOverRequest:
        args = body_map(body, messages.TAKE_OVER)
        handle = check_type(args, "session_handle", str, required=True)
        taken = check_type(args, "taken", bool, required=True)
        check_length("session_handle", handle, MAX_HANDLE_CHARS)
        return cls(session_handle=handle, taken=taken)

    def to_body(self) -> dict[str, Any]:
        return {"session_handle": self.session_handle, "taken": self.taken}
