"""Numbers too big for the wire and NUL characters get the same one-line errors as any other
bad argument, and their history row is completed (docs/tools.md#errors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.gateway import GatewayEnv
from zodex_gateway.history import ERROR, HistoryStore

pytestmark = pytest.mark.timeout(90)

HUGE = 2**64


def recorded(genv: GatewayEnv) -> list[tuple[str, str, str | None]]:
    """(tool, status, error) of every recorded call, oldest first."""
    with HistoryStore(genv.state_home / "zodex" / "local" / "history", recover=False) as store:
        return [(inv.tool_name, inv.status, inv.error) for inv in store.invocations()]


async def test_integers_beyond_64_bits_are_refused_like_any_bad_number(
    genv: GatewayEnv, connect, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    async with connect(genv) as mcp:
        for field in ("yield_time_ms", "timeout_ms"):
            for value in (HUGE, 2**200):
                text = await mcp.error(
                    "exec_command", cmd=f"touch {marker}", workdir=str(tmp_path), **{field: value}
                )
                assert text == f"{field} must be < 2^64"
        started = await mcp.exec("cat", str(tmp_path), yield_time_ms=50)
        handle = started["session_handle"]
        assert await mcp.error("write_stdin", session_handle=handle, yield_time_ms=HUGE) == (
            "yield_time_ms must be < 2^64"
        )
        # The largest 64-bit value is an ordinary (clamped) number.
        polled = await mcp.write(handle, yield_time_ms=HUGE - 1, chars="\u0004")
        assert polled["status"] in ("running", "exited")
        await mcp.write(handle, kill_process=True)
    assert not marker.exists()
    rows = recorded(genv)
    refused = [row for row in rows if row[2] is not None and "2^64" in row[2]]
    assert len(refused) == 5
    assert all(status == ERROR for _tool, status, _error in refused), rows
    assert all(status != "pending" for _tool, status, _error in rows), rows


async def test_nul_in_cmd_workdir_or_patch_path_names_the_field(
    genv: GatewayEnv, connect, tmp_path: Path
) -> None:
    async with connect(genv) as mcp:
        assert await mcp.error("exec_command", cmd="echo a\x00b > made", workdir=str(tmp_path)) == (
            "cmd must not contain a NUL character"
        )
        for tool, extra in (("exec_command", {"cmd": "true"}), ("apply_patch", {"patch": "x"})):
            assert await mcp.error(tool, workdir=f"{tmp_path}\x00/x", **extra) == (
                "workdir must not contain a NUL character"
            )
        for header in ("*** Add File: a\x00b", "*** Delete File: a\x00b", "*** Update File: a\x00b"):
            patch = f"*** Begin Patch\n{header}\n+x\n*** End Patch"
            text = await mcp.error("apply_patch", patch=patch, workdir=str(tmp_path))
            assert text == "Invalid patch hunk on line 2: 'a\\x00b' is not a valid file name", text
        (tmp_path / "old.txt").write_text("one\n")
        move = "*** Begin Patch\n*** Update File: old.txt\n*** Move to: n\x00w.txt\n@@\n-one\n+two\n*** End Patch"
        text = await mcp.error("apply_patch", patch=move, workdir=str(tmp_path))
        assert text == "Invalid patch hunk on line 3: 'n\\x00w.txt' is not a valid file name", text
        assert (tmp_path / "old.txt").read_text() == "one\n"
        # In chars a NUL is Ctrl-@, typed as it is.
        started = await mcp.exec("od -An -c", str(tmp_path), yield_time_ms=50)
        typed = await mcp.write(started["session_handle"], chars="a\x00b\n\u0004")
        output, _last = await mcp.drain(started["session_handle"])
        assert "a  \\0   b" in typed["output"] + output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]
    assert all(status != "pending" for _tool, status, _error in recorded(genv))
