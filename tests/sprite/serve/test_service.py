"""A real ``zodex sprite serve`` as root, called with the mcp SDK: the front door, the
three tools, commands as the agent account, and what the agent cannot reach."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.sprite.serve.sprite_support import MARKER, MARKER_VALUE, Sprite, sprite_setup, tool_json
from tests.support.accounts import require_root
from tests.support.gateway import Mcp
from tests.support.progress import a_cancel_leaves_output_and_command
from tests.support.waiting import wait_for_value


@pytest.fixture(scope="module")
def sprite() -> Iterator[Sprite]:
    require_root()
    with sprite_setup() as running:
        yield running


def test_health_is_open_and_nothing_else_is_served(sprite: Sprite) -> None:
    with sprite.client() as http:
        health = http.get("/health")
        assert health.status_code == 200
        body = health.json()
        assert body["status"] == "ok" and body["component"] == "zodex-sprite" and body["version"]
        for path in ("/", "/v1/events", "/mcpx", "/mcp/extra", "/health/x", "/observer"):
            answer = http.get(path, params={"key": sprite.key})
            assert (answer.status_code, answer.content) == (404, b""), path
            # Without the key the same paths are 401: nothing tells a scanner what exists.
            for method in ("GET", "HEAD", "POST", "OPTIONS"):
                answer = http.request(method, path)
                assert (answer.status_code, answer.content) == (401, b""), (method, path)
        assert (http.post("/health").status_code, http.post("/health").content) == (401, b"")


def test_anything_but_the_key_in_its_place_is_401_with_an_empty_body(sprite: Sprite) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    wrong = sprite.key[:-1] + ("A" if sprite.key[-1] != "A" else "B")
    with sprite.client() as http:
        attempts = [
            http.post("/mcp", json=initialize, headers=headers),
            http.post("/mcp", json=initialize, headers=headers, params={"key": wrong}),
            http.post("/mcp/", json=initialize, headers={**headers, "Authorization": f"Bearer {wrong}"}),
            http.post("/mcp", json=initialize, headers={**headers, "X-Key": sprite.key}),
            http.post("/mcp", json=initialize, headers={**headers, "Authorization": f"Basic {sprite.key}"}),
            http.post("/mcp", data={"key": sprite.key}, headers=headers),
            http.post("/mcp", json=initialize, headers={**headers, "Cookie": f"key={sprite.key}"}),
            # Two different keys: refused even though one is right.
            http.post(
                "/mcp",
                json=initialize,
                headers={**headers, "Authorization": f"Bearer {wrong}"},
                params={"key": sprite.key},
            ),
            http.post("/mcp", json=initialize, headers=headers, params=[("key", sprite.key), ("key", wrong)]),
            http.post("/mcp", json=initialize, headers=headers, params=[("key", wrong), ("key", sprite.key)]),
            # A key of the wrong length, with whitespace, or not ASCII.
            http.post("/mcp", json=initialize, headers=headers, params={"key": sprite.key + "A"}),
            http.post("/mcp", json=initialize, headers=headers, params={"key": sprite.key[:8]}),
            http.post("/mcp", json=initialize, headers=headers, params={"key": f" {sprite.key}"}),
            http.post("/mcp", json=initialize, headers=headers, params={"key": f"{sprite.key}\u00e9"}),
            # Any other method, with no key.
            http.get("/mcp", headers=headers),
            http.head("/mcp"),
            http.options("/mcp/"),
            http.delete("/mcp"),
        ]
        for answer in attempts:
            assert (answer.status_code, answer.content) == (401, b"")
        bearer = http.post(
            "/mcp", json=initialize, headers={**headers, "Authorization": f"Bearer {sprite.key}"}
        )
        assert bearer.status_code == 200
        assert [t["name"] for t in bearer.json()["result"]["tools"]] == [
            "exec_command",
            "write_stdin",
            "apply_patch",
        ]


async def test_three_tools_and_instructions_naming_the_workspace(sprite: Sprite) -> None:
    async with sprite.mcp() as mcp:
        tools = await mcp.list_tools()
        assert sorted(t.name for t in tools.tools) == ["apply_patch", "exec_command", "write_stdin"]
        instructions = sprite.extra["initialize"].instructions
        assert "remote execution tools in a Linux workspace" in instructions
        assert f"Default workdir: {sprite.workspace}" in instructions
        assert "set_agent_alias" not in instructions


async def test_commands_run_as_the_agent_in_a_clean_login_environment(sprite: Sprite) -> None:
    profile = sprite.agent.home / ".bash_profile"
    profile.write_text("export ZODEX_PROFILE_WAS_READ=yes\n")
    os.chown(profile, sprite.agent.uid, sprite.agent.gid)
    async with sprite.mcp() as mcp:
        result = tool_json(
            await mcp.call_tool(
                "exec_command",
                {"cmd": "id -un; echo uid=$(id -u); env", "workdir": str(sprite.workspace)},
            )
        )
    lines = result["output"].splitlines()
    assert lines[0] == sprite.agent.name
    assert lines[1] == f"uid={sprite.agent.uid}"
    env = dict(line.split("=", 1) for line in lines[2:] if "=" in line)
    assert env["HOME"] == str(sprite.agent.home)
    assert env["USER"] == env["LOGNAME"] == sprite.agent.name
    assert env["SHELL"] == "/bin/bash"
    assert env["LANG"] == "C.UTF-8"
    assert env["PAGER"] == "cat" and env["TERM"] == "xterm-256color"
    assert env["ZODEX_PROFILE_WAS_READ"] == "yes"
    assert MARKER not in env
    assert MARKER_VALUE not in result["output"]


async def test_the_agent_cannot_read_the_key_anywhere(sprite: Sprite) -> None:
    assert sprite.process is not None
    pid = sprite.process.pid
    probes = [
        f"cat {sprite.key_file}",
        f"cat {sprite.config}",
        f"ls -la {sprite.state_dir}",
        f"cat {sprite.state_dir}/logs/sprite.log",
        f"cat /proc/{pid}/environ",
        f"tr '\\0' ' ' < /proc/{pid}/cmdline",
        f"grep -r -s . {sprite.state_dir} {sprite.base}/etc",
        f"cat {sprite.runtime_dir}/runtime/owner.json",
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -i key",
        # The root helper (the service's child) and the worker ($PPID of the command).
        f"for p in $(pgrep -P {pid}); do cat /proc/$p/environ /proc/$p/maps; ls -l /proc/$p/fd; done",
        "ls -l /proc/$PPID/fd; tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' ' ' < /proc/$PPID/cmdline",
        f"ls -la {sprite.runtime_dir}/runtime {sprite.runtime_dir}/runtime/w; cat {sprite.runtime_dir}/runtime/w/*",
    ]
    async with sprite.mcp() as mcp:
        for probe in probes:
            result = tool_json(await mcp.call_tool("exec_command", {"cmd": probe, "workdir": "/"}))
            assert sprite.key not in result["output"], probe
            assert f"-> {sprite.state_dir}" not in result["output"], probe  # no descriptor of it either
        denied = tool_json(
            await mcp.call_tool("exec_command", {"cmd": f"cat {sprite.key_file}", "workdir": "/"})
        )
        assert denied["exit_code"] != 0 and "Permission denied" in denied["output"]
        environ = tool_json(
            await mcp.call_tool("exec_command", {"cmd": f"cat /proc/{pid}/environ", "workdir": "/"})
        )
        assert environ["exit_code"] != 0 and MARKER_VALUE not in environ["output"]


async def test_patched_and_spill_files_belong_to_the_agent(sprite: Sprite) -> None:
    patch = "*** Begin Patch\n*** Add File: made.txt\n+made by the model\n*** End Patch\n"
    async with sprite.mcp() as mcp:
        patched = await mcp.call_tool("apply_patch", {"patch": patch, "workdir": str(sprite.workspace)})
        assert not patched.is_error, patched.content[0].text
        made = (sprite.workspace / "made.txt").stat()
        assert (made.st_uid, made.st_gid) == (sprite.agent.uid, sprite.agent.gid)
        big = tool_json(
            await mcp.call_tool(
                "exec_command",
                {"cmd": "seq 1 20000", "workdir": str(sprite.workspace)},
            )
        )
        spill = Path(big["output_file"])
        assert spill.is_relative_to(sprite.agent.home)
        assert spill.stat().st_uid == sprite.agent.uid
        read = tool_json(
            await mcp.call_tool(
                "exec_command", {"cmd": f"tail -n 1 {spill}", "workdir": str(sprite.workspace)}
            )
        )
        assert read["output"].strip() == "20000"


async def test_ctrl_c_kill_and_timeout(sprite: Sprite) -> None:
    workdir = str(sprite.workspace)
    async with sprite.mcp() as mcp:
        for stop in ({"chars": "\u0003"}, {"kill_process": True}):
            started = tool_json(
                await mcp.call_tool(
                    "exec_command", {"cmd": "sleep 300", "workdir": workdir, "yield_time_ms": 200}
                )
            )
            handle = started["session_handle"]
            ended = tool_json(
                await mcp.call_tool("write_stdin", {"session_handle": handle, "yield_time_ms": 5000, **stop})
            )
            assert ended["status"] == "exited", (stop, ended)
        timed = tool_json(
            await mcp.call_tool("exec_command", {"cmd": "sleep 300", "workdir": workdir, "timeout_ms": 1000})
        )
        assert timed["termination_reason"] == "timeout", timed


async def test_a_killed_worker_loses_only_its_sessions(sprite: Sprite) -> None:
    other = sprite.workspace / "other"
    other.mkdir(exist_ok=True)
    os.chown(other, sprite.agent.uid, sprite.agent.gid)
    async with sprite.mcp() as mcp:
        first = tool_json(
            await mcp.call_tool(
                "exec_command", {"cmd": "sleep 300", "workdir": str(sprite.workspace), "yield_time_ms": 200}
            )
        )
        second = tool_json(
            await mcp.call_tool("exec_command", {"cmd": "cat", "workdir": str(other), "yield_time_ms": 200})
        )
        registry = sprite.runtime_dir / "runtime" / "w"
        records = [json.loads(p.read_text()) for p in registry.glob("*.json")]
        victim = next(r for r in records if r["workdir"] == str(sprite.workspace))
        os.kill(victim["pid"], signal.SIGKILL)
        lost = await mcp.call_tool(
            "write_stdin", {"session_handle": first["session_handle"], "yield_time_ms": 100}
        )
        assert lost.is_error and "was lost" in lost.content[0].text
        alive = tool_json(
            await mcp.call_tool(
                "write_stdin",
                {"session_handle": second["session_handle"], "chars": "still here\n", "yield_time_ms": 500},
            )
        )
        assert alive["status"] == "running" and "still here" in alive["output"]
        await mcp.call_tool("write_stdin", {"session_handle": second["session_handle"], "kill_process": True})


def test_the_log_and_status_file(sprite: Sprite) -> None:
    assert sprite.process is not None
    status = wait_for_value(
        lambda: (
            json.loads(sprite.state_dir.joinpath("status.json").read_text())
            if sprite.state_dir.joinpath("status.json").exists()
            else None
        )
    )
    assert status["pid"] == sprite.process.pid
    assert status["port"] == sprite.port
    assert status["agent_user"] == sprite.agent.name
    assert status["version"] and status["started_at"] and status["public_url"]
    log = sprite.log_file.read_text()
    assert "serving" in log and sprite.key not in log


async def test_a_workdir_the_agent_cannot_enter_runs_nothing(sprite: Sprite) -> None:
    """The service and the helper can enter the service's state directory; the worker, as
    the agent, cannot: the call is a tool error and nothing runs there."""
    async with sprite.mcp() as mcp:
        for workdir in (sprite.state_dir, sprite.state_dir / "logs"):
            result = await mcp.call_tool(
                "exec_command", {"cmd": "ls > seen.txt; echo ran", "workdir": str(workdir)}
            )
            text = result.content[0].text
            # Seen from the agent: a directory it cannot enter, or one it cannot even see.
            assert result.is_error and ("Permission denied" in text or "does not exist" in text), text
            assert not (workdir / "seen.txt").exists()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_every_tool_at_the_clients_default_revision_and_at_the_handshake(
    sprite: Sprite, mode: str
) -> None:
    """docs/modes.md#revisions: the SDK's client as it comes (2026-07-28) and pinned to the
    handshake, through the key in the URL: results, never errors."""
    url = f"{sprite.url}/mcp?key={sprite.key}"
    async with (
        httpx2.AsyncClient(verify=False, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        assert client.protocol_version == {"auto": "2026-07-28", "legacy": "2025-11-25"}[mode]
        workdir = str(sprite.workspace)
        ran = tool_json(await client.call_tool("exec_command", {"cmd": "id -un", "workdir": workdir}))
        assert ran["output"] == f"{sprite.agent.name}\n"
        running = tool_json(
            await client.call_tool(
                "exec_command", {"cmd": "read l; echo got $l", "workdir": workdir, "yield_time_ms": 50}
            )
        )
        typed = tool_json(
            await client.call_tool(
                "write_stdin",
                {"session_handle": running["session_handle"], "chars": "x\n", "yield_time_ms": 5000},
            )
        )
        assert "got x" in typed["output"]
        patch = f"*** Begin Patch\n*** Add File: revision-{mode}.txt\n+made\n*** End Patch\n"
        patched = await client.call_tool("apply_patch", {"patch": patch, "workdir": workdir})
        assert not patched.is_error, patched.content[0].text


async def test_a_setuid_program_gives_the_agent_nothing(sprite: Sprite) -> None:
    """PR_SET_NO_NEW_PRIVS is set by the helper, however the service was started (here with
    no unit): a setuid-root program the agent runs stays the agent's."""
    suid_id = sprite.base / "suid-id"
    shutil.copy("/usr/bin/id", suid_id)
    os.chown(suid_id, 0, 0)
    suid_id.chmod(0o4755)
    outside = subprocess.run(
        ["setpriv", f"--reuid={sprite.agent.uid}", f"--regid={sprite.agent.gid}", "--clear-groups", str(suid_id), "-u"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert outside.stdout == "0\n", (
        "the setuid bit works on this file system: the check below means something"
    )
    async with sprite.mcp() as mcp:
        ran = tool_json(
            await mcp.call_tool(
                "exec_command",
                {"cmd": f"{suid_id} -u; grep NoNewPrivs /proc/self/status", "workdir": str(sprite.workspace)},
            )
        )
    assert ran["output"].splitlines() == [str(sprite.agent.uid), "NoNewPrivs:\t1"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_waiting_call_reports_progress_and_a_cancel_ends_its_wait(sprite: Sprite, mode: str) -> None:
    """docs/tools.md#progress-and-cancellation through Sprite's front door, at the default
    interval (5 s): a note while the command waits, a cancel that leaves the output and the
    command to the next poll."""
    fifo = sprite.workspace / f"gate-{mode}"
    os.mkfifo(fifo)
    os.chown(fifo, sprite.agent.uid, sprite.agent.gid)
    url = f"{sprite.url}/mcp?key={sprite.key}"
    async with (
        httpx2.AsyncClient(verify=False, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        await a_cancel_leaves_output_and_command(Mcp(client), sprite.workspace, fifo)
    fifo.unlink()
