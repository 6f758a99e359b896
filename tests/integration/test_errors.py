"""Every bad input gets one clear line with isError, and changes nothing (docs/tools.md#errors, docs/sessions.md#after-exit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.gateway import GatewayEnv

pytestmark = pytest.mark.timeout(90)


def worker_records(genv: GatewayEnv) -> list[Path]:
    return [p for d in genv.runtime_dirs() for p in (d / "w").glob("*.json")]


async def test_workdir_checks_in_order_with_no_side_effect(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    missing = tmp_path / "missing"
    async with connect(genv) as mcp:
        assert await mcp.error("exec_command", cmd="touch made", workdir="relative/dir") == (
            "workdir must be an absolute path: relative/dir"
        )
        assert (
            await mcp.error("exec_command", cmd="touch made", workdir="~")
            == "workdir must be an absolute path: ~"
        )
        assert (
            await mcp.error("exec_command", cmd="touch made", workdir="")
            == "workdir must be an absolute path: "
        )
        assert await mcp.error("exec_command", cmd="touch made", workdir=str(missing)) == (
            f"workdir does not exist: {missing}"
        )
        assert await mcp.error("exec_command", cmd="touch made", workdir=str(a_file)) == (
            f"workdir is not a directory: {a_file}"
        )
        # The workdir is checked before the command.
        assert (
            await mcp.error("exec_command", cmd="", workdir="rel") == "workdir must be an absolute path: rel"
        )
        assert await mcp.error("exec_command", cmd="", workdir=str(tmp_path)) == "cmd must not be empty"
        assert await mcp.error("exec_command", cmd="   ", workdir=str(tmp_path)) == "cmd must not be empty"
        assert (
            await mcp.error("apply_patch", patch="garbage", workdir="rel")
            == "workdir must be an absolute path: rel"
        )
        assert await mcp.error("apply_patch", patch="garbage", workdir=str(missing)) == (
            f"workdir does not exist: {missing}"
        )
        assert worker_records(genv) == [], "no worker may be spawned for a refused call"
    assert not missing.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


async def test_argument_types_and_sizes(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        assert await mcp.error("exec_command", workdir=str(tmp_path)) == "cmd is required"
        assert await mcp.error("exec_command", cmd="true") == "workdir is required"
        assert await mcp.error("exec_command", cmd=["ls"], workdir=str(tmp_path)) == "cmd must be a string"
        assert await mcp.error("exec_command", cmd="true", workdir=str(tmp_path), yield_time_ms="5") == (
            "yield_time_ms must be an integer"
        )
        assert await mcp.error("exec_command", cmd="true", workdir=str(tmp_path), timeout_ms=-1) == (
            "timeout_ms must be ≥ 0"
        )
        big = "x" * (64 * 1024 + 1)
        assert await mcp.error("exec_command", cmd=big, workdir=str(tmp_path)) == (
            f"cmd is too long ({len(big)} characters; the limit is {64 * 1024})"
        )
        assert await mcp.error("write_stdin") == "session_handle is required"
        assert await mcp.error("write_stdin", session_handle="abc", kill_process="yes") == (
            "kill_process must be a boolean"
        )
        assert await mcp.error("no_such_tool") == "Unknown tool: no_such_tool"
        assert worker_records(genv) == []


async def test_unknown_handles(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        for bogus in ("nope", "abcdefg1-0123456789", "", "x" * 32):
            assert await mcp.error("write_stdin", session_handle=bogus) == f"Unknown session handle: {bogus}"
        assert await mcp.error("write_stdin", session_handle="x" * 200) == (
            "session_handle is too long (200 characters; the limit is 32)"
        )
        r = await mcp.exec("sleep 30", str(tmp_path), yield_time_ms=50)
        real = r["session_handle"]
        # Same worker, forged random part: still unknown, never another session.
        forged = real[:-1] + ("a" if real[-1] != "a" else "b")
        assert await mcp.error("write_stdin", session_handle=forged) == f"Unknown session handle: {forged}"
        await mcp.write(real, kill_process=True)


async def test_handle_format(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        handles = []
        for _ in range(5):
            r = await mcp.exec("sleep 30", str(tmp_path), yield_time_ms=50)
            handles.append(r["session_handle"])
        for h in handles:
            await mcp.write(h, kill_process=True)
    assert len(set(handles)) == 5
    for h in handles:
        assert len(h) <= 20
        assert h.count("-") <= 1
        assert h.replace("-", "").isalnum() and h.isascii()
    # Same workdir → same worker prefix: handles route without a table.
    assert len({h.split("-")[0] for h in handles}) == 1


async def test_bad_chars_size(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec("cat", str(tmp_path), yield_time_ms=50)
        big = "y" * (64 * 1024 + 1)
        text = await mcp.error("write_stdin", session_handle=r["session_handle"], chars=big)
        assert text.startswith("chars is too long")
        still = await mcp.write(r["session_handle"], yield_time_ms=50)
        assert still["status"] == "running" and still["output"] == ""
        await mcp.write(r["session_handle"], kill_process=True)
