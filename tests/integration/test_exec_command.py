"""docs/tools.md#exec_command to #results through a real MCP client, over stdio and HTTP, against real workers."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.support.gate import Gate
from tests.support.gateway import GatewayEnv, gateway_env, wait_for
from tests.support.slowdown import scaled

pytestmark = pytest.mark.timeout(90)


async def test_lists_four_tools_with_annotations_and_schemas(genv: GatewayEnv, connect) -> None:
    async with connect(genv) as mcp:
        listed = await mcp.client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == {"exec_command", "write_stdin", "apply_patch", "set_agent_alias"}
    for tool in tools.values():
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False
        assert tool.annotations.open_world_hint is False
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
    assert tools["exec_command"].input_schema["required"] == ["cmd", "workdir"]
    assert tools["exec_command"].output_schema is not None
    assert tools["write_stdin"].output_schema is not None
    for tool in tools.values():
        schema_text = str(tool.input_schema)
        assert "agent" not in schema_text and "runtime_id" not in schema_text


async def test_descriptions_state_the_gateways_effective_limits(connect) -> None:
    with gateway_env(exec_yield_ms=1_500, yield_max_ms=20_000, timeout_ms=90_000, poll_settle_ms=120) as env:
        async with connect(env) as mcp:
            listed = await mcp.client.list_tools()
    tools = {t.name: t.input_schema["properties"] for t in listed.tools}
    assert "Default 1500, clamped to 50..20000." in tools["exec_command"]["yield_time_ms"]["description"]
    assert "Default 90000, clamped to 1000..7200000." in tools["exec_command"]["timeout_ms"]["description"]
    write_yield = tools["write_stdin"]["yield_time_ms"]["description"]
    assert "Default 10000, clamped to 50..20000." in write_yield and "quiet for 120 ms" in write_yield


async def test_trivial_command_returns_at_once(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        started = time.monotonic()
        r = await mcp.exec("echo hello", str(tmp_path), yield_time_ms=30000)
        elapsed = time.monotonic() - started
    assert r["status"] == "exited"
    assert r["exit_code"] == 0
    assert r["termination_reason"] == "exit"
    assert r["output"] == "hello\n"
    assert r["cwd"] == os.path.realpath(tmp_path)
    assert r["summary"].startswith("exited 0 after ")
    assert "session_handle" not in r and "signal" not in r and "output_file" not in r
    assert elapsed < 10, "an exited command must not wait for the yield window"


async def test_text_block_holds_the_same_json(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    import json

    async with connect(genv) as mcp:
        result = await mcp.call("exec_command", cmd="printf 'a\\tb'", workdir=str(tmp_path))
    assert len(result.content) == 1
    assert json.loads(result.content[0].text) == result.structured_content
    assert result.structured_content["output"] == "a\tb"


async def test_nonzero_exit_is_a_normal_result(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        result = await mcp.call("exec_command", cmd="echo oops >&2; exit 3", workdir=str(tmp_path))
    assert not result.is_error
    assert result.structured_content["exit_code"] == 3
    assert result.structured_content["output"] == "oops\n"
    assert result.structured_content["summary"].startswith("exited 3 after")


async def test_signal_exit(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec("kill -SEGV $$", str(tmp_path))
    assert r["exit_code"] == -1
    assert r["signal"] == "SIGSEGV"
    assert r["termination_reason"] == "exit"


async def test_environment_and_fresh_shell(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec(
            "echo $PAGER $GIT_PAGER $MANPAGER $SYSTEMD_PAGER $LESS $NO_COLOR $TERM; "
            "tty >/dev/null && echo tty; stty size; export ZX_LEAK=1; cd /",
            str(tmp_path),
        )
        again = await mcp.exec("echo [${ZX_LEAK:-}] $(pwd)", str(tmp_path))
    lines = r["output"].splitlines()
    assert lines[0] == "cat cat cat cat FRX 1 xterm-256color"
    assert lines[1] == "tty"
    assert lines[2] == "50 200"
    assert again["output"] == f"[] {os.path.realpath(tmp_path)}\n"


async def test_running_command_gives_handle_then_poll_deltas(
    genv: GatewayEnv, connect, tmp_path: Path
) -> None:
    gates = Gate.make(tmp_path, "second"), Gate.make(tmp_path, "third")
    async with connect(genv) as mcp:
        r = await mcp.exec(
            f"echo one; {gates[0].wait}; echo two; {gates[1].wait}; echo three",
            str(tmp_path),
            yield_time_ms=round(scaled(500)),
        )
        assert r["status"] == "running"
        handle = r["session_handle"]
        assert (
            r["summary"]
            == f"still running after {r['wall_time_ms'] / 1000:.1f}s; use session_handle {handle} to poll"
        )
        assert r["output"] == "one\n"
        await gates[0].release()
        second = await mcp.output_until(handle, "two")
        await gates[1].release()
        rest, last = await mcp.drain(handle)
    assert (second, rest) == ("two\n", "three\n"), "polls must carry only new output, never repeat"
    assert last["status"] == "exited" and last["exit_code"] == 0
    assert "session_handle" not in last


async def test_poll_returns_after_output_settles(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        gate = Gate.make(tmp_path)
        r = await mcp.exec(f"{gate.wait}; echo ready; sleep 30", str(tmp_path), yield_time_ms=50)
        assert r["output"] == ""
        await gate.release()
        started = time.monotonic()
        polled = await mcp.write(r["session_handle"], yield_time_ms=20000)
        elapsed = time.monotonic() - started
        await mcp.write(r["session_handle"], kill_process=True)
    assert polled["output"] == "ready\n"
    assert polled["status"] == "running"
    assert elapsed < scaled(5), "a poll returns once new output has been quiet for 250 ms"


async def test_yield_is_clamped(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        started = time.monotonic()
        r = await mcp.exec("sleep 5", str(tmp_path), yield_time_ms=0)
        elapsed = time.monotonic() - started
        assert r["status"] == "running"
        assert r["wall_time_ms"] >= 50, "yield below 50 ms is raised to 50 ms"
        assert elapsed < 3
        started = time.monotonic()
        polled = await mcp.write(r["session_handle"], yield_time_ms=1)
        assert time.monotonic() - started < 3
        assert polled["status"] == "running"
        await mcp.write(r["session_handle"], kill_process=True)


async def test_typing_into_a_session(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec('read -r name; echo "hello $name"', str(tmp_path), yield_time_ms=100)
        assert r["status"] == "running"
        typed = await mcp.write(r["session_handle"], chars="zodex\n", yield_time_ms=5000)
    assert "hello zodex" in typed["output"]


async def test_prompt_without_newline_reaches_the_model(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec("printf 'Password: '; read -r x; echo got $x", str(tmp_path), yield_time_ms=500)
        assert r["output"] == "Password: "
        typed = await mcp.write(r["session_handle"], chars="s3\n", yield_time_ms=5000)
    assert typed["output"].endswith("got s3\n")


async def test_ctrl_c_interrupts(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec(
            "trap 'echo caught; exit 7' INT; echo armed; sleep 60 & wait", str(tmp_path), yield_time_ms=500
        )
        assert r["output"] == "armed\n"
        typed = await mcp.write(r["session_handle"], chars="\u0003", yield_time_ms=5000)
        if typed["status"] == "running":
            _, typed = await mcp.drain(r["session_handle"])
    assert typed["status"] == "exited"
    assert typed["exit_code"] == 7


async def test_ctrl_d_ends_input(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec("cat > got.txt; echo eof", str(tmp_path), yield_time_ms=200)
        await mcp.write(r["session_handle"], chars="abc\n", yield_time_ms=200)
        done = await mcp.write(r["session_handle"], chars="\u0004", yield_time_ms=5000)
        if done["status"] == "running":
            _, done = await mcp.drain(r["session_handle"])
    assert done["status"] == "exited" and done["exit_code"] == 0
    assert (tmp_path / "got.txt").read_text() == "abc\n"


async def test_cwd_follows_the_running_command(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    async with connect(genv) as mcp:
        r = await mcp.exec("cd sub && exec sleep 30", str(tmp_path), yield_time_ms=300)
        assert r["cwd"] == os.path.realpath(sub)
        await mcp.write(r["session_handle"], kill_process=True)


async def test_symlinked_workdir_reports_physical_cwd(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    async with connect(genv) as mcp:
        r = await mcp.exec("pwd -P", str(link))
    assert r["cwd"] == os.path.realpath(real)
    assert r["output"] == f"{os.path.realpath(real)}\n"


async def test_typing_waits_for_the_answer_not_older_output(
    genv: GatewayEnv, connect, tmp_path: Path
) -> None:
    gate = Gate.make(tmp_path)
    printed = tmp_path / "printed"
    async with connect(genv) as mcp:
        r = await mcp.exec(
            f"{gate.wait}; echo first; touch printed; read -r x; echo answer $x; sleep 30",
            str(tmp_path),
            yield_time_ms=50,
        )
        assert r["output"] == ""
        await gate.release()
        await wait_for(printed.exists, what="the command to print its first line")
        # "first" is waiting unread; let it be quiet for longer than the 250 ms a poll settles on.
        await asyncio.sleep(max(0.0, printed.stat().st_mtime + 0.5 - time.time()))
        typed = await mcp.write(r["session_handle"], chars="hi\n", yield_time_ms=5000)
        await mcp.write(r["session_handle"], kill_process=True)
    assert "first\n" in typed["output"]
    assert "answer hi\n" in typed["output"]
