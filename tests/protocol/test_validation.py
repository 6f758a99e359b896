"""Argument rules of docs/tools.md#argument-rules: exact messages, and the order in which they are checked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import MAX_HANDLE_CHARS
from zodex_protocol.limits import Limits
from zodex_protocol.validation import (
    CheckedWorkdir,
    check_exec_args,
    check_patch_args,
    check_workdir,
    check_write_args,
)

LIMITS = Limits(max_cmd_chars=10, max_chars_chars=5, max_patch_chars=8)


def refusal(check: Any, *args: Any) -> str:
    with pytest.raises(ProtocolError) as info:
        check(*args)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    assert info.value.is_tool_level
    assert "\n" not in info.value.message
    return info.value.message


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    return {
        "dir": str(tmp_path),
        "file": str(tmp_path / "file.txt"),
        "missing": str(tmp_path / "missing"),
        "link": str(tmp_path / "link"),
        "real": os.path.realpath(tmp_path / "real"),
    }


def test_workdir_messages(places: dict[str, str]) -> None:
    for bad in ("", "relative/dir", "~", "~/x", "./x"):
        assert refusal(check_workdir, bad) == f"workdir must be an absolute path: {bad}"
    assert refusal(check_workdir, places["missing"]) == f"workdir does not exist: {places['missing']}"
    assert refusal(check_workdir, places["file"]) == f"workdir is not a directory: {places['file']}"
    assert check_workdir(places["link"]) == places["real"], "the worker is chosen by real path"
    assert not Path(places["missing"]).exists()


def test_exec_checks_types_then_workdir_then_cmd(places: dict[str, str]) -> None:
    good = {"cmd": "true", "workdir": places["dir"]}
    assert refusal(check_exec_args, {"workdir": "rel"}, LIMITS) == "cmd is required"
    assert refusal(check_exec_args, {"cmd": None, "workdir": "rel"}, LIMITS) == "cmd is required"
    assert refusal(check_exec_args, {"cmd": "true"}, LIMITS) == "workdir is required"
    assert refusal(check_exec_args, {"cmd": ["ls"], "workdir": "rel"}, LIMITS) == "cmd must be a string"
    assert refusal(check_exec_args, {"cmd": "true", "workdir": 7}, LIMITS) == "workdir must be a string"
    assert (
        refusal(check_exec_args, {"cmd": "", "workdir": "rel"}, LIMITS)
        == "workdir must be an absolute path: rel"
    )
    assert refusal(check_exec_args, {"cmd": "x" * 11, "workdir": places["file"]}, LIMITS) == (
        f"workdir is not a directory: {places['file']}"
    )
    for blank in ("", "   ", "\n\t"):
        assert refusal(check_exec_args, {**good, "cmd": blank}, LIMITS) == "cmd must not be empty"
    assert refusal(check_exec_args, {**good, "cmd": "x" * 11}, LIMITS) == (
        "cmd is too long (11 characters; the limit is 10)"
    )
    assert check_exec_args({**good, "cmd": "x" * 10}, LIMITS) == os.path.realpath(places["dir"])


@pytest.mark.parametrize("name", ["yield_time_ms", "timeout_ms"])
def test_exec_integer_fields(places: dict[str, str], name: str) -> None:
    good = {"cmd": "true", "workdir": places["dir"]}
    for bad in ("5", 1.5, True, [1]):
        assert refusal(check_exec_args, {**good, name: bad}, LIMITS) == f"{name} must be an integer"
    assert refusal(check_exec_args, {**good, name: -1}, LIMITS) == f"{name} must be ≥ 0"
    # Types come before the workdir: the first problem named is the field's.
    assert refusal(check_exec_args, {"cmd": "true", "workdir": "rel", name: "5"}, LIMITS) == (
        f"{name} must be an integer"
    )
    for fine in (0, 50, 10**9, None):
        check_exec_args({**good, name: fine}, LIMITS)


def test_write_args() -> None:
    assert refusal(check_write_args, {}, LIMITS) == "session_handle is required"
    assert refusal(check_write_args, {"session_handle": 5}, LIMITS) == "session_handle must be a string"
    assert refusal(check_write_args, {"session_handle": "h", "chars": 3}, LIMITS) == "chars must be a string"
    assert refusal(check_write_args, {"session_handle": "h", "yield_time_ms": -5}, LIMITS) == (
        "yield_time_ms must be ≥ 0"
    )
    for bad in ("yes", 1, 0):
        assert refusal(check_write_args, {"session_handle": "h", "kill_process": bad}, LIMITS) == (
            "kill_process must be a boolean"
        )
    assert refusal(check_write_args, {"session_handle": "h", "chars": "123456"}, LIMITS) == (
        "chars is too long (6 characters; the limit is 5)"
    )
    # A kill ignores chars, but an oversized field is still refused before anything happens.
    assert refusal(check_write_args, {"session_handle": "h", "chars": "123456", "kill_process": True}, LIMITS)
    assert check_write_args({"session_handle": "h", "chars": "", "kill_process": False}, LIMITS) == "h"
    assert check_write_args({"session_handle": "h", "chars": "12345"}, LIMITS) == "h"


def test_a_handle_longer_than_any_handle_is_refused_not_echoed() -> None:
    longest = "h" * MAX_HANDLE_CHARS
    assert check_write_args({"session_handle": longest}, LIMITS) == longest
    assert refusal(check_write_args, {"session_handle": "h" * 33}, LIMITS) == (
        "session_handle is too long (33 characters; the limit is 32)"
    )
    assert refusal(check_write_args, {"session_handle": "h" * 1_000_000}, LIMITS) == (
        "session_handle is too long (1000000 characters; the limit is 32)"
    )


def test_patch_checks_workdir_before_the_patch(places: dict[str, str]) -> None:
    assert refusal(check_patch_args, {"patch": "x"}, LIMITS) == "workdir is required"
    assert refusal(check_patch_args, {"workdir": "rel"}, LIMITS) == "workdir must be an absolute path: rel"
    assert refusal(check_patch_args, {"patch": 5, "workdir": places["missing"]}, LIMITS) == (
        f"workdir does not exist: {places['missing']}"
    )
    assert refusal(check_patch_args, {"workdir": places["dir"]}, LIMITS) == "patch is required"
    assert (
        refusal(check_patch_args, {"patch": 5, "workdir": places["dir"]}, LIMITS) == "patch must be a string"
    )
    assert refusal(check_patch_args, {"patch": "x" * 9, "workdir": places["dir"]}, LIMITS) == (
        "patch is too long (9 characters; the limit is 8)"
    )
    assert check_patch_args({"patch": "", "workdir": places["link"]}, LIMITS) == places["real"]


def test_the_workdir_is_checked_before_the_commands_nul() -> None:
    """docs/tools.md#exec_command: types, the workdir, then cmd empty, cmd NUL, length."""
    with pytest.raises(ProtocolError) as refused:
        check_exec_args({"cmd": "echo a\x00b", "workdir": "relative"}, Limits())
    assert refused.value.message == "workdir must be an absolute path: relative"
    with pytest.raises(ProtocolError) as refused:
        check_exec_args({"cmd": "echo a\x00b", "workdir": "/"}, Limits())
    assert refused.value.message == "cmd must not contain a NUL character"
    with pytest.raises(ProtocolError) as refused:
        check_exec_args({"cmd": " ", "workdir": "/no/such/dir"}, Limits())
    assert refused.value.message == "workdir does not exist: /no/such/dir"


def test_a_carried_workdir_check_answers_as_a_fresh_one(places: dict[str, str]) -> None:
    """The gateway checks a call's workdir once and carries the check to the request: every
    outcome, message and order stays what a fresh check gives."""
    cases: list[dict[str, Any]] = [
        {"cmd": "true", "workdir": w} for w in (*places.values(), "", "rel", "/a\x00b")
    ]
    cases += [
        {"workdir": places["missing"]},
        {"cmd": "", "workdir": places["dir"]},
        {"cmd": 1, "workdir": "rel"},
    ]
    for args in cases:
        carried = CheckedWorkdir.check(args["workdir"])
        for check, given in ((check_exec_args, args), (check_patch_args, {"patch": "p", **args})):
            try:
                expected: object = check(given, LIMITS)
            except ProtocolError as exc:
                assert refusal(check, given, LIMITS, carried) == exc.message
            else:
                assert check(given, LIMITS, carried) == expected


def test_the_carried_check_is_used_for_its_own_workdir_only(places: dict[str, str]) -> None:
    link = places["link"]
    carried = CheckedWorkdir.check(link)
    assert carried.real == places["real"]
    os.unlink(link)  # the path changes after the check: the carried one is not taken again
    os.symlink(places["dir"], link)
    assert check_exec_args({"cmd": "true", "workdir": link}, LIMITS, carried) == places["real"]
    assert check_exec_args({"cmd": "true", "workdir": link}, LIMITS) == os.path.realpath(places["dir"])
    other = CheckedWorkdir.check(places["missing"])
    assert check_patch_args({"patch": "", "workdir": link}, LIMITS, other) == os.path.realpath(places["dir"])
