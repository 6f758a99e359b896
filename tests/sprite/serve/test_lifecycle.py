"""Starting, rotating, TLS and stopping a real ``zodex sprite serve`` (root only)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx2
import pytest

from tests.sprite.serve.sprite_support import agent_processes, sprite_setup, tool_json
from tests.support.accounts import require_root
from tests.support.waiting import wait_until
from zodex_gateway.sprite.key import new_key, write_key


@pytest.fixture(autouse=True)
def _root() -> None:
    require_root()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "no key file at"),
        ("", "is empty"),
        ("change-me", "shorter than 32 characters"),
        ("change-me-" * 5, "looks like a default"),
    ],
)
def test_a_missing_or_guessable_key_refuses_to_start(content: str | None, reason: str) -> None:
    with sprite_setup(start=False) as sprite:
        sprite.key_file.unlink()
        if content is not None:
            sprite.key_file.write_text(content)
            sprite.key_file.chmod(0o600)
        done = subprocess.run(sprite.argv(), capture_output=True, text=True, timeout=60, cwd="/")
        assert done.returncode == 1
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and reason in lines[0] and "rotate-key" in lines[0], done.stderr
        with httpx2.Client() as http, pytest.raises(httpx2.ConnectError):
            http.get(f"http://127.0.0.1:{sprite.port}/health")


async def test_a_rotated_key_is_in_force_within_5_seconds_and_sessions_survive() -> None:
    with sprite_setup() as sprite:
        async with sprite.mcp() as mcp:
            started = tool_json(
                await mcp.call_tool(
                    "exec_command", {"cmd": "cat", "workdir": str(sprite.workspace), "yield_time_ms": 200}
                )
            )
        old, new = sprite.key, new_key()
        write_key(sprite.key_file, new, sprite.service.uid, sprite.service.gid)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        headers = {"Accept": "application/json, text/event-stream"}

        def status_with(key: str) -> int:
            with sprite.client() as http:
                return http.post("/mcp", params={"key": key}, json=body, headers=headers).status_code

        wait_until(lambda: status_with(old) == 401, timeout=5, what="the old key to be refused")
        assert status_with(new) == 200
        async with sprite.mcp(new) as mcp:
            echoed = tool_json(
                await mcp.call_tool(
                    "write_stdin",
                    {
                        "session_handle": started["session_handle"],
                        "chars": "survived\n",
                        "yield_time_ms": 500,
                    },
                )
            )
        assert echoed["status"] == "running" and "survived" in echoed["output"]


async def test_tls_with_a_self_signed_certificate() -> None:
    with sprite_setup(tls=True) as sprite:
        assert sprite.url.startswith("https://")
        with sprite.client() as http:
            assert http.get("/health").json()["component"] == "zodex-sprite"
        with httpx2.Client() as plain, pytest.raises(httpx2.HTTPError):
            plain.get(f"http://127.0.0.1:{sprite.port}/health")
        async with sprite.mcp() as mcp:
            result = tool_json(await mcp.call_tool("exec_command", {"cmd": "id -un", "workdir": "/"}))
        assert result["output"].strip() == sprite.agent.name


async def test_sigterm_leaves_no_process_of_the_agent() -> None:
    with sprite_setup() as sprite:
        async with sprite.mcp() as mcp:
            await mcp.call_tool(
                "exec_command",
                {
                    "cmd": "setsid nohup sleep 1000 >/dev/null 2>&1 & env -i setsid sleep 1001 & sleep 300",
                    "workdir": str(sprite.workspace),
                    "yield_time_ms": 500,
                },
            )
        assert agent_processes(sprite)
        assert sprite.stop() == 0, sprite.extra.get("output")
        assert agent_processes(sprite) == []
        assert not sprite.state_dir.joinpath("status.json").exists()
        # The runtime directory's content goes (the signing key, the registry); the directory
        # itself is in a root-owned one and is made fresh at the next start.
        runtime = sprite.runtime_dir / "runtime"
        assert not runtime.exists() or list(runtime.iterdir()) == []


async def test_sigkill_of_the_service_leaves_no_process_of_the_agent() -> None:
    """The root helper notices its service died (its end of the socketpair closes) and kills
    every process of the agent, those the model started and one started outside the service."""
    with sprite_setup() as sprite:
        async with sprite.mcp() as mcp:
            await mcp.call_tool(
                "exec_command",
                {
                    "cmd": "setsid nohup sleep 1002 >/dev/null 2>&1 & (trap '' TERM HUP; sleep 1003) & sleep 300",
                    "workdir": str(sprite.workspace),
                    "yield_time_ms": 500,
                },
            )
        outside = subprocess.Popen(
            ["setpriv", f"--reuid={sprite.agent.uid}", f"--regid={sprite.agent.gid}", "--clear-groups",
             "sleep", "1004"],
        )  # fmt: skip
        assert sprite.process is not None
        assert len(agent_processes(sprite)) >= 4  # a worker, its command, two sleeps, outside
        sprite.process.kill()
        sprite.process.wait()
        wait_until(
            lambda: agent_processes(sprite) == [], timeout=15, what="the agent's processes to be killed"
        )
        assert outside.wait(timeout=10) == -9
        # Then the helper itself exits: nothing of this Sprite is left running.
        wait_until(lambda: not _runs(str(sprite.config)), timeout=15, what="the root helper to exit")


def _runs(argument: str) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in argv:
            return True
    return False
