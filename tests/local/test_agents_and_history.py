"""Agents, aliases, model context and durable history through a real Local runtime (docs/agents.md, docs/history.md)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import Mcp, pid_alive, wait_for
from tests.support.local import LocalEnv, connected, local_env
from zodex_gateway.history import HistoryStore

pytestmark = pytest.mark.timeout(120)


async def call(mcp: Mcp, conversation: str, tool: str, **args: Any) -> Any:
    return await mcp.client.call_tool(tool, args, meta={"openai/session": conversation})


def history(local: LocalEnv, *args: str) -> list[dict[str, Any]]:
    data = json.loads(local.run("local", "history", "--format", "json", *args).stdout)
    invocations: list[dict[str, Any]] = data["invocations"]
    return invocations


async def test_conversations_are_agents_with_stable_ids(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            first = await call(mcp, "conv-a", "set_agent_alias", alias="Rindle implementation")
            other = await call(mcp, "conv-b", "set_agent_alias", alias="Docs pass")
            a, b = first.structured_content, other.structured_content
            assert re.fullmatch(r"[a-z0-9]{4}", a["agent_id"]) and a["alias"] == "Rindle implementation"
            assert a["agent_id"] != b["agent_id"]
            assert not first.is_error and a["agent_id"] in first.content[0].text
            ran = await call(mcp, "conv-a", "exec_command", cmd="echo hi", workdir=str(tmp_path))
            assert not ran.is_error
        local.run("local", "stop")
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            again = await call(mcp, "conv-a", "set_agent_alias", alias="Rindle implementation, part 2")
        assert again.structured_content["agent_id"] == a["agent_id"], "ids survive a runtime restart"
        records = history(local)
        assert [r["tool_name"] for r in records] == ["exec_command"], "aliases are not timeline invocations"
        assert records[0]["agent_id"] == a["agent_id"]


async def test_twelve_concurrent_first_calls_make_one_agent(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            results = await asyncio.gather(
                *(
                    call(mcp, "conv-burst", "exec_command", cmd=f"echo {i}", workdir=str(tmp_path))
                    for i in range(12)
                )
            )
        assert all(not r.is_error for r in results)
        records = history(local)
        assert len(records) == 12
        assert len({r["agent_id"] for r in records}) == 1 and records[0]["agent_id"]


async def test_alias_rules(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            too_long = await call(mcp, "conv-x", "set_agent_alias", alias="x" * 81)
            assert too_long.is_error and "too long" in too_long.content[0].text
            control = await call(mcp, "conv-x", "set_agent_alias", alias="bad\u0007bell")
            assert control.is_error and "control" in control.content[0].text
            ok = await call(mcp, "conv-x", "set_agent_alias", alias="  Eighty  " + "y" * 70 + "  ")
            assert not ok.is_error and ok.structured_content["alias"] == "Eighty  " + "y" * 70
            cleared = await call(mcp, "conv-x", "set_agent_alias", alias="")
            assert cleared.structured_content == {"agent_id": ok.structured_content["agent_id"], "alias": ""}
            tools = {t.name for t in (await mcp.client.list_tools()).tools}
            assert tools == {"exec_command", "write_stdin", "apply_patch", "set_agent_alias"}
            nobody = await mcp.client.call_tool("set_agent_alias", {"alias": "who am I"})
            assert nobody.is_error and "identity" in nobody.content[0].text


async def test_history_records_calls_output_and_evidence(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            ran = await call(
                mcp,
                "conv-h",
                "exec_command",
                cmd="printf '\\033[1mbold\\033[0m\\n'; exit 2",
                workdir=str(tmp_path),
            )
            assert ran.structured_content["output"] == "bold\n"
            bad = await call(mcp, "conv-h", "exec_command", cmd="true", workdir="relative")
            assert bad.is_error
            patch = "*** Begin Patch\n*** Add File: new.txt\n+hello\n*** End Patch\n"
            patched = await call(mcp, "conv-h", "apply_patch", patch=patch, workdir=str(tmp_path))
            assert not patched.is_error
            started = await call(
                mcp, "conv-h", "exec_command", cmd="sleep 30", workdir=str(tmp_path), yield_time_ms=50
            )
            handle = started.structured_content["session_handle"]
            await call(mcp, "conv-other", "write_stdin", session_handle=handle, kill_process=True)
        records = history(local, "--raw")
        assert [r["tool_name"] for r in records] == [
            "exec_command", "exec_command", "apply_patch", "exec_command", "write_stdin"
        ]  # fmt: skip
        first, failed, patch_record, creator, killer = records
        assert first["status"] == "ok" and first["args"]["cmd"].startswith("printf")
        assert "zodex_context" not in json.dumps(first["result"]), "context is never stored"
        assert failed["status"] == "error" and "absolute" in (failed["error"] or "")
        assert killer["agent_id"] != creator["agent_id"]
        assert killer["cross_agent"] is True or killer.get("handle_creator") == creator["agent_id"]
        for record in records:
            assert isinstance(record["duration_ms"], int) and record["started_at"]
        store = HistoryStore(local.root / "state" / "zodex" / "local" / "history", recover=False)
        try:
            [inv] = store.invocations(invocation_id=patch_record["id"])
            assert [(f.operation, os.path.basename(f.path)) for f in inv.files] == [("created", "new.txt")]
            raw_out, complete = store.output(handle_of(store, first["id"]))
            assert "\x1b[1mbold" in raw_out and complete
            assert store.process(handle)["reason"] == "killed"
        finally:
            store.close()
        markdown = local.run("local", "history", "--last", "2").stdout
        assert "write_stdin" in markdown and "apply_patch" not in markdown
        only_other = history(local, "--agent", killer["agent_id"])
        assert [r["tool_name"] for r in only_other] == ["write_stdin"]
        assert history(local, "--workdir", "/nonexistent/dir") == []


def handle_of(store: HistoryStore, invocation_id: str) -> str:
    [inv] = store.invocations(invocation_id=invocation_id)
    assert inv.session_handle, "an exec that ended within its yield still names its session"
    return inv.session_handle


async def test_context_once_and_switches(tmp_path: Path) -> None:
    with local_env() as local:
        codex = local.root / "codex"
        (codex / "skills" / "deploy").mkdir(parents=True)
        (codex / "AGENTS.md").write_text("Always run the tests.\n")
        (codex / "skills" / "deploy" / "SKILL.md").write_text(
            "---\nname: deploy\ndescription: Ship it.\n---\nbody\n"
        )
        (tmp_path / "AGENTS.md").write_text("Workdir rules.\n")
        local.run("local", "start", str(tmp_path), CODEX_HOME=str(codex))
        async with connected(local) as mcp:
            first = await call(mcp, "conv-c", "exec_command", cmd="echo one", workdir=str(tmp_path))
            context = first.structured_content["zodex_context"]
            assert "Always run the tests." in json.dumps(context)
            assert "deploy" in json.dumps(context) and "AGENTS.md" in json.dumps(context)
            assert first.structured_content["output"] == "one\n"
            second = await call(mcp, "conv-c", "exec_command", cmd="echo two", workdir=str(tmp_path))
            assert "zodex_context" not in second.structured_content
            newcomer = await call(mcp, "conv-d", "exec_command", cmd="true", workdir="relative")
            assert newcomer.is_error and "Always run the tests." in newcomer.content[0].text
            assert newcomer.content[0].text.startswith("workdir must be an absolute path: relative")
        local.run("local", "stop")
        for key in (
            "context.global-instructions",
            "context.global-skills",
            "context.workdir-hint",
            "context.workdir-skills",
        ):
            local.run("local", "config", "set", key, "off")
        local.run("local", "start", str(tmp_path), CODEX_HOME=str(codex))
        async with connected(local) as mcp:
            quiet = await call(mcp, "conv-e", "exec_command", cmd="echo three", workdir=str(tmp_path))
        assert "zodex_context" not in quiet.structured_content


async def test_crash_mid_command_leaves_an_incomplete_record(tmp_path: Path) -> None:
    import httpx2

    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        call_body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "exec_command",
                "arguments": {"cmd": "sleep 30", "workdir": str(tmp_path), "yield_time_ms": 20000},
                "_meta": {"openai/session": "conv-k"},
            },
        }
        headers = {"X-Zodex-Local-Token": token, "Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(timeout=30) as http:
            pending = asyncio.create_task(http.post(discovery["mcp"]["url"], json=call_body, headers=headers))
            await wait_for(lambda: len(history(local)) == 1, what="the call to be recorded before it runs")
            assert history(local)[0]["status"] == "pending"
            os.kill(discovery["pid"], signal.SIGKILL)
            await wait_for(lambda: not pid_alive(discovery["pid"]), what="the runtime to die")
            with pytest.raises(httpx2.HTTPError):
                await asyncio.wait_for(pending, 10)
        local.run("local", "stop")
        local.run("local", "start", str(tmp_path))
        [record] = history(local)
        assert record["status"] == "incomplete"


async def test_fifty_megabytes_are_recorded_completely(tmp_path: Path) -> None:
    with local_env() as local:
        # Within the per-command cap (the spill cap), so every byte is kept.
        local.run("local", "config", "set", "output.spill-cap", "64mb")
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            r = await call(
                mcp,
                "conv-big",
                "exec_command",
                cmd="head -c 50000000 /dev/zero | tr '\\0' 'x' | fold -w 100",
                workdir=str(tmp_path),
                yield_time_ms=60000,
            )
            result = r.structured_content
            while result["status"] == "running":
                result = await mcp.write(result["session_handle"], yield_time_ms=60000)
        assert result["output_chars"] == 50_000_000 + 499_999
        [record] = history(local)
        store = HistoryStore(local.root / "state" / "zodex" / "local" / "history", recover=False)
        try:
            handle = handle_of(store, record["id"])
            await wait_for(
                lambda: (store.process(handle) or {}).get("ended_at") is not None, what="the end event"
            )
            text, complete = store.output(handle)
        finally:
            store.close()
        assert complete
        # The raw stream has the PTY's \r\n line ends: 500,000 lines → 499,999 line breaks.
        assert len(text) == 50_000_000 + 2 * 499_999
