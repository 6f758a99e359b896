"""Outside clients calling Zodex's tools as a model makes them: Claude Code (the version first
tested and the newest on the pinned Node) and Codex, each talking to a loopback stand-in for
its model API that asks for every tool in turn and records the results the client hands
back. Each is configured with what `zodex local mcp-config --client claude|codex [--http]`
prints, run as printed, against a real Local runtime: every tool gives a real result, each
conversation is one agent on /v1/agents, and the same entry works after `stop` and `start`
(docs/modes.md#clients-tested-in-ci)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.conversations import Client, Conversation
from tests.support.local import LocalEnv, local_env
from tests.support.outside_clients import installed, observer_get
from tests.support.tool_script import DONE

pytestmark = pytest.mark.timeout(600)

CLIENTS = ["claude-2.1.197", "claude-2.1.332", "codex-0.171.0"]
ENTRIES = ["zodex", "zodex-http"]
# Per-request clients (revision 2026-07-28) over HTTP carry no identity of their own
# (docs/agents.md#identity): the alias is refused, and says how to get one.
NO_IDENTITY = (
    "set_agent_alias needs to know which conversation is calling, and this call carries no agent identity"
)
PER_REQUEST_OVER_HTTP = {("claude-2.1.332", "zodex-http")}


def printed_entry(local: LocalEnv, client: str, entry: str) -> str:
    args = ["local", "mcp-config", "--client", "codex" if client.startswith("codex") else "claude"]
    if entry == "zodex-http":
        args.append("--http")
    return local.run(*args).stdout


def check_results(conversation: Conversation, workdir: Path, alias: str, identified: bool) -> str | None:
    """Every tool answered with its real result; the agent id the alias landed on."""
    said = conversation.explain()
    assert conversation.done.returncode == 0, said
    results = conversation.script.results
    assert [r.tool for r in results] == [
        "exec_command",
        "exec_command",
        "write_stdin",
        "apply_patch",
        "set_agent_alias",
    ], said
    ran, started, typed, patched, named = results
    assert not any(r.is_error for r in results[:4]), said
    assert '"output":"zodex-42\\n"' in ran.text and '"exit_code":0' in ran.text, said
    assert '"status":"running"' in started.text and '"session_handle":' in started.text, said
    assert "got hello" in typed.text and '"exit_code":0' in typed.text, said
    assert f"A {workdir / 'standin.txt'}" in patched.text, said
    assert (workdir / "standin.txt").read_text() == "written through a model\n"
    assert DONE in conversation.done.stdout, said
    if not identified:
        assert named.is_error and NO_IDENTITY in named.text, said
        return None
    assert not named.is_error, said
    found = json.loads(named.text[named.text.index("{") :])
    assert found["alias"] == alias, said
    agent_id: str = found["agent_id"]
    return agent_id


def check_one_agent(local: LocalEnv, workdir: Path, agent_id: str | None, alias: str) -> None:
    """Every call of the conversation is on its agent, which /v1/agents shows with the alias."""
    records = observer_get(local, f"/v1/timeline?workdir={workdir}")["records"]
    kinds = sorted(r["kind"] for r in records)
    assert kinds == ["command", "command", "file_changes", "stdin"], records
    assert {r["agent_id"] for r in records} == {agent_id}, records
    if agent_id is None:
        return
    agents: dict[str, Any] = {a["agent_id"]: a for a in observer_get(local, "/v1/agents")["agents"]}
    assert agents[agent_id]["alias"] == alias, agents
    assert agents[agent_id]["workdirs"] == [workdir.as_posix()], agents[agent_id]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", CLIENTS)
def test_a_client_calls_every_tool_through_the_printed_entry(name: str, entry: str) -> None:
    installed()  # skip before starting anything when npm is unreachable
    with local_env() as local:
        local.run("local", "start", str(local.root))
        client = Client(name, local, local.root / "home")
        client.configure(entry, printed_entry(local, name, entry))
        identified = (name, entry) not in PER_REQUEST_OVER_HTTP

        agents = []
        for turn in ("first", "after restart"):
            if turn == "after restart":
                local.run("local", "stop")
                local.run("local", "start", str(local.root))
            workdir = local.root / f"work-{len(agents)}"
            workdir.mkdir()
            alias = f"{name} {entry} {turn}"
            conversation = client.converse(entry, workdir, alias)
            agent_id = check_results(conversation, workdir, alias, identified)
            check_one_agent(local, workdir, agent_id, alias)
            agents.append(agent_id)
        if identified:
            assert agents[0] != agents[1], "each conversation is its own agent"
