"""`zodex local connect` spawned by a real MCP client over stdio, against real runtimes that
start and stop under it (docs/modes.md#zodex-local-connect)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.support.gateway import Mcp
from tests.support.local import ZODEX, LocalEnv, local_env

pytestmark = pytest.mark.timeout(120)

NOT_RUNNING = f"Zodex Local is not running; start it with {ZODEX} local start"


@asynccontextmanager
async def bridge(local: LocalEnv, mode: str = "legacy") -> AsyncIterator[Mcp]:
    """A client that starts `zodex local connect` itself, as Claude Code or Codex would:
    with the ``initialize`` handshake (``legacy``), or per request (``auto``: 2026-07-28)."""
    params = StdioServerParameters(
        command=ZODEX, args=["local", "connect"], env=local.env(), cwd=str(local.root)
    )
    async with Client(params, read_timeout_seconds=60, mode=mode) as client:
        yield Mcp(client)


def history_agents(local: LocalEnv) -> list[str | None]:
    done = local.run("local", "history", "--format", "json")
    return [item["agent_id"] for item in json.loads(done.stdout)["invocations"]]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_initialize_and_tools_list_answer_while_local_is_down(tmp_path: Path, mode: str) -> None:
    with local_env() as local:
        async with bridge(local, mode) as mcp:
            assert mcp.client.server_info is not None and mcp.client.server_info.name == "zodex"
            assert mcp.client.protocol_version == {"legacy": "2025-11-25", "auto": "2026-07-28"}[mode]
            assert "Suggested first workdir" not in (mcp.client.instructions or ""), (
                "no runtime, no start directory"
            )
            assert mcp.client.server_capabilities.tools is not None
            listed = await mcp.client.list_tools()
            names = [tool.name for tool in listed.tools]
            assert names == ["exec_command", "write_stdin", "apply_patch", "set_agent_alias"]
            assert await mcp.error("exec_command", cmd="true", workdir=str(tmp_path)) == NOT_RUNNING
            assert await mcp.error("set_agent_alias", alias="x") == NOT_RUNNING


async def test_tools_list_states_the_configured_limits(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "config", "set", "session.exec-yield", "3s")
        local.run("local", "config", "set", "mcp.read-only-hint", "false")
        async with bridge(local) as mcp:
            listed = {tool.name: tool for tool in (await mcp.client.list_tools()).tools}
        exec_tool = listed["exec_command"]
        assert "Default 3000" in exec_tool.input_schema["properties"]["yield_time_ms"]["description"]
        assert exec_tool.annotations is not None and exec_tool.annotations.read_only_hint is False


async def test_one_bridge_survives_start_stop_and_start(tmp_path: Path) -> None:
    with local_env() as local:
        async with bridge(local) as mcp:
            assert await mcp.error("exec_command", cmd="true", workdir=str(tmp_path)) == NOT_RUNNING
            local.run("local", "start", str(tmp_path))
            first = local.discovery()
            result = await mcp.exec("echo one", str(tmp_path))
            assert result["output"] == "one\n" and result["exit_code"] == 0

            local.run("local", "stop")
            assert await mcp.error("exec_command", cmd="true", workdir=str(tmp_path)) == NOT_RUNNING
            local.run("local", "start", str(tmp_path))
            second = local.discovery()
            assert second["runtime_id"] != first["runtime_id"]
            assert second["mcp"]["url"] == first["mcp"]["url"], "the port is reused when free"
            result = await mcp.exec("echo two", str(tmp_path))
            assert result["output"] == "two\n"
            running = await mcp.exec("sleep 30", str(tmp_path), yield_time_ms=50)
            killed = await mcp.write(running["session_handle"], kill_process=True)
            assert killed["status"] == "exited"
            # The runtime's session id, kept by the bridge: its agent is the same one.
            named = await mcp.call("set_agent_alias", alias="bridge across restarts")
            assert not named.is_error, named.content[0].text
            agent_id = named.structured_content["agent_id"]
        agents = history_agents(local)
        assert agents == [agent_id] * 4, f"one bridge is one conversation across restarts: {agents}"


async def test_meta_and_errors_pass_through(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with bridge(local) as mcp:
            missing = await mcp.error("exec_command", cmd="true", workdir=str(tmp_path / "nope"))
            assert str(tmp_path / "nope") in missing
            # _meta reaches the runtime as sent: its openai/session names the agent there.
            for conversation in ("conv-a", "conv-b", "conv-a"):
                meta: Any = {"openai/session": conversation, "progressToken": conversation}
                result = await mcp.client.call_tool(
                    "exec_command", {"cmd": "echo meta", "workdir": str(tmp_path)}, meta=meta
                )
                assert not result.is_error and result.structured_content is not None
                assert result.structured_content["output"] == "meta\n"
        agents = history_agents(local)[-3:]
        assert None not in agents and agents[0] == agents[2] != agents[1], agents


async def test_a_session_id_the_runtime_no_longer_accepts_gets_a_new_handshake(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        key = local.root / "state" / "zodex" / "local" / "runtime" / "mcp-session-key"
        async with bridge(local) as mcp, bridge(local) as other:
            await mcp.exec("echo before", str(tmp_path))
            await other.exec("echo other", str(tmp_path))
            local.run("local", "stop")
            key.unlink()  # a new key at the next start: ids signed before are refused (404)
            local.run("local", "start", str(tmp_path))
            after = await mcp.exec("echo after", str(tmp_path))
            assert after["output"] == "after\n"
        agents = history_agents(local)
        # Two bridges are two conversations; the refused id was replaced by a new session.
        assert None not in agents and len(set(agents)) == 3, agents


async def test_a_state_directory_others_can_write_refuses_each_call(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        state = local.root / "state"
        async with bridge(local) as mcp:
            await mcp.exec("true", str(tmp_path))
            state.chmod(0o777)
            try:
                refused = await mcp.error("exec_command", cmd="true", workdir=str(tmp_path))
                with pytest.raises(MCPError) as listing:
                    await mcp.client.list_tools()
            finally:
                state.chmod(0o700)
            assert refused.startswith(f"{state} (owner ")
            assert "is writable by group or others (mode 0777)" in refused
            assert listing.value.code == -32603 and listing.value.message == refused
            await mcp.exec("true", str(tmp_path))  # and works again once it is the user's
