"""Argument rules of docs/tools.md#argument-rules, shared by the gateway (before routing) and the worker."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import MAX_HANDLE_CHARS
from zodex_protocol.limits import Limits

MAX_WIRE_INT = 2**64


def check_workdir(workdir: str) -> str:
    """Return the workdir's real path, or raise with the exact message of docs/tools.md#exec_command.

    No ``~`` expansion and no default: a relative path is refused as given.
    """
    check_no_nul("workdir", workdir)
    if not workdir or not os.path.isabs(workdir):
        raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"workdir must be an absolute path: {workdir}")
    # One stat for both checks: what os.path.exists and then os.path.isdir would each take.
    try:
        mode = os.stat(workdir).st_mode
    except (OSError, ValueError):
        raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"workdir does not exist: {workdir}") from None
    if not stat.S_ISDIR(mode):
        raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"workdir is not a directory: {workdir}")
    return os.path.realpath(workdir)


@dataclass(frozen=True)
class CheckedWorkdir:
    """A workdir as given and what :func:`check_workdir` found: its real path, or the
    refusal. The gateway checks a call's workdir once, for history and for the request
    (the real path is the costly part: a system call per component), and carries this."""

    given: str
    real: str | None  # None: refused with ``refusal``
    refusal: str = ""

    @classmethod
    def check(cls, given: str) -> CheckedWorkdir:
        try:
            return cls(given, check_workdir(given))
        except ProtocolError as exc:
            return cls(given, None, exc.message)

    def real_path(self) -> str:
        """The real path, or the check's refusal raised again."""
        if self.real is None:
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, self.refusal)
        return self.real


def _checked(workdir: str, checked: CheckedWorkdir | None) -> str:
    """The real path of ``workdir``: from ``checked`` when it is this workdir's check."""
    if checked is not None and checked.given == workdir:
        return checked.real_path()
    return check_workdir(workdir)


def check_type(args: Mapping[str, Any], name: str, kind: type, *, required: bool) -> Any:
    """One argument's presence and JSON type, with a message naming the field."""
    value = args.get(name)
    if value is None:
        if required:
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"{name} is required")
        return None
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"{name} must be an integer")
        if value < 0:
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"{name} must be ≥ 0")
        if value >= MAX_WIRE_INT:
            # The wire (msgpack) carries unsigned 64-bit integers at most; bigger ones are
            # refused here rather than failing as they are sent.
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"{name} must be < 2^64")
    elif not isinstance(value, kind):
        noun = {str: "a string", bool: "a boolean"}.get(kind, kind.__name__)
        raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"{name} must be {noun}")
    return value


def check_optional(args: Mapping[str, Any], kinds: Mapping[str, type]) -> None:
    """The JSON types of optional arguments, checked in ``kinds``' order (the first wrong one is named)."""
    for name, kind in kinds.items():
        check_type(args, name, kind, required=False)


def check_no_nul(name: str, value: str) -> None:
    """A path or command line cannot hold NUL: the OS would refuse it deep inside the worker."""
    if "\x00" in value:
        raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"{name} must not contain a NUL character")


def check_length(name: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise ProtocolError(
            ErrorCode.INVALID_ARGUMENT,
            f"{name} is too long ({len(value)} characters; the limit is {limit})",
        )


def check_exec_args(args: Mapping[str, Any], limits: Limits, checked: CheckedWorkdir | None = None) -> str:
    """docs/tools.md#exec_command order: workdir absolute → exists → directory, then cmd.
    Returns the real path; ``checked``: the workdir's check, when the caller already made it."""
    cmd = check_type(args, "cmd", str, required=True)
    workdir = check_type(args, "workdir", str, required=True)
    check_optional(args, {"yield_time_ms": int, "timeout_ms": int, "wait_for": str})
    real = _checked(workdir, checked)
    if not cmd.strip():
        raise ProtocolError(ErrorCode.INVALID_ARGUMENT, "cmd must not be empty")
    check_no_nul("cmd", cmd)
    check_length("cmd", cmd, limits.max_cmd_chars)
    return real


def check_write_args(args: Mapping[str, Any], limits: Limits) -> str:
    handle = check_type(args, "session_handle", str, required=True)
    chars = check_type(args, "chars", str, required=False)
    check_optional(args, {"yield_time_ms": int, "kill_process": bool, "wait_for": str})
    # No handle is longer; refused as any oversized argument rather than echoed back whole.
    check_length("session_handle", handle, MAX_HANDLE_CHARS)
    if chars:
        check_length("chars", chars, limits.max_chars_chars)
    return str(handle)


def check_patch_args(args: Mapping[str, Any], limits: Limits, checked: CheckedWorkdir | None = None) -> str:
    """docs/tools.md#apply_patch: the workdir is checked before the patch is even looked at."""
    workdir = check_type(args, "workdir", str, required=True)
    real = _checked(workdir, checked)
    patch = check_type(args, "patch", str, required=True)
    check_length("patch", patch, limits.max_patch_chars)
    return real
