"""MCP Inspector's CLI (2.12.0 on Node 22) against a real Zodex Local, over HTTP with the
token header and through `zodex local connect`: every tool, an alias that lands on the
caller's own agent in the observer API and on Liveboard in Chromium."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.gateway.viewers.watch.live_support import chromium, watching
from tests.support.local import LocalEnv, local_env
from tests.support.outside_clients import TIMEOUT, Inspector, client_env, installed, observer_get

pytestmark = pytest.mark.timeout(120)  # each Inspector run starts Node (and the bridge, Python)

TRANSPORTS = ["http", "connect"]
TOOLS = {"exec_command", "write_stdin", "apply_patch", "set_agent_alias"}


@contextmanager
def running() -> Iterator[tuple[LocalEnv, Path]]:
    installed()  # skip before starting anything when npm is unreachable
    with local_env() as local:
        local.run("local", "start", str(local.root))
        home = local.root / "home"
        home.mkdir()
        workdir = local.root / "work"
        workdir.mkdir()
        yield local, workdir


def agent(local: LocalEnv, agent_id: str) -> dict[str, Any]:
    agents = {a["agent_id"]: a for a in observer_get(local, "/v1/agents")["agents"]}
    assert agent_id in agents, f"{agent_id} not in /v1/agents: {sorted(agents)}"
    found: dict[str, Any] = agents[agent_id]
    return found


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_inspector_calls_every_tool(transport: str) -> None:
    with running() as (local, workdir):
        inspector = Inspector(local, local.root / "home", transport)
        listed = inspector.run("--method", "tools/list")
        assert listed.returncode == 0, listed.stderr
        assert {tool["name"] for tool in json.loads(listed.stdout)["tools"]} == TOOLS

        ran = inspector.call("exec_command", cmd="printf 'ran %s\\n' $((6*7)); pwd", workdir=str(workdir))
        assert (ran["status"], ran["exit_code"]) == ("exited", 0)
        assert ran["output"] == f"ran 42\n{workdir}\n"

        # A session that outlives one Inspector run is typed into by the next one.
        started = inspector.call(
            "exec_command", cmd='read line; echo "got $line"', workdir=str(workdir), yield_time_ms=200
        )
        assert started["status"] == "running", started
        typed = inspector.call(
            "write_stdin", session_handle=started["session_handle"], chars="hello\n", yield_time_ms=10000
        )
        assert (typed["status"], typed["exit_code"]) == ("exited", 0), typed
        assert "got hello" in typed["output"]

        patched = inspector.call(
            "apply_patch",
            workdir=str(workdir),
            patch="*** Begin Patch\n*** Add File: made.txt\n+written by Inspector\n*** End Patch",
        )
        assert "A " + str(workdir / "made.txt") in patched["text"]
        assert (workdir / "made.txt").read_text() == "written by Inspector\n"

        named = inspector.call("set_agent_alias", alias=f"Inspector over {transport}")
        assert named["alias"] == f"Inspector over {transport}"
        assert agent(local, named["agent_id"])["alias"] == f"Inspector over {transport}"

        # Each Inspector run is its own conversation: the command above has an agent of its own.
        records = observer_get(local, f"/v1/timeline?workdir={workdir}")["records"]
        command = next(r for r in records if r["kind"] == "command" and r["command"].startswith("printf"))
        assert command["agent_id"] is not None
        assert workdir.as_posix() in agent(local, command["agent_id"])["workdirs"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_inspector_sees_a_tool_error_as_one(transport: str) -> None:
    with running() as (local, _):
        inspector = Inspector(local, local.root / "home", transport)
        done = inspector.run(
            "--method",
            "tools/call",
            "--tool-name",
            "exec_command",
            "--tool-arg",
            "cmd=touch made",
            "workdir=rel",
        )
        assert done.returncode != 0
        assert "tool_is_error" in done.stderr
        result = json.loads(done.stdout)
        assert result["isError"] is True
        assert result["content"][0]["text"] == "workdir must be an absolute path: rel"
        assert not (local.root / "made").exists()


async def test_inspector_aliases_show_on_liveboard() -> None:
    with running() as (local, _), watching(local) as watch:
        ids = {}
        for transport in TRANSPORTS:
            inspector = Inspector(local, local.root / "home", transport)
            ids[transport] = inspector.call("set_agent_alias", alias=f"Board via {transport}")["agent_id"]
        assert ids["http"] != ids["connect"]
        async with chromium() as browser:
            page = await browser.new_page()
            await page.goto(watch.url)
            await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")
            for transport, agent_id in ids.items():
                board = page.locator(f'[data-testid="column"][data-agent-id="{agent_id}"]')
                await expect(board.get_by_test_id("alias")).to_have_text(
                    f"Board via {transport}", timeout=20_000
                )


@pytest.mark.parametrize("http", [False, True])
def test_inspector_takes_the_printed_entries_as_its_config_file(http: bool) -> None:
    """`--client cursor` is an mcpServers file as printed; the `json` entry is one server of
    such a file. Inspector reads both with `--config <file> --server <name>`."""
    with running() as (local, _):
        extra = ["--http"] if http else []
        name = "zodex-http" if http else "zodex"
        cursor = local.root / "cursor.json"
        cursor.write_text(local.run("local", "mcp-config", "--client", "cursor", *extra).stdout)
        entry = json.loads(local.run("local", "mcp-config", "--client", "json", *extra).stdout)
        generic = local.root / "generic.json"
        generic.write_text(json.dumps({"mcpServers": {name: entry}}))
        for config in (cursor, generic):
            argv = [str(installed() / "mcp-inspector"), "--cli", "--config", str(config), "--server", name]
            listed = subprocess.run(
                [*argv, "--method", "tools/list"],
                env=client_env(local, local.root / "home"),
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                cwd=local.root,
            )
            assert listed.returncode == 0, f"{config.name}: {listed.stderr}{listed.stdout}"
            assert {tool["name"] for tool in json.loads(listed.stdout)["tools"]} == TOOLS
