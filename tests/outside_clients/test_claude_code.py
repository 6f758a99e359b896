"""Claude Code's CLI (2.1.197, and 2.1.332 beside the HTTP entry) takes what
`zodex local mcp-config --client claude` prints, run as printed, and its own health check
reports Zodex connected, also after Local restarts. No login is needed for
`claude mcp add-json` and `claude mcp list`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.conversations import Client
from tests.support.local import ZODEX, LocalEnv, local_env
from tests.support.outside_clients import TIMEOUT, client_env, installed

pytestmark = pytest.mark.timeout(120)

CONNECTED = f"zodex: {ZODEX} local connect - ✔ Connected"


def claude(local: LocalEnv, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(installed() / "claude"), *args],
        env=client_env(local, home),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=local.root,
    )


def listed(local: LocalEnv, home: Path) -> list[str]:
    done = claude(local, home, "mcp", "list")
    assert done.returncode == 0, f"claude mcp list exited {done.returncode}: {done.stderr}{done.stdout}"
    return done.stdout.splitlines()


def machine_config() -> bytes | None:
    """The machine's own Claude Code config, which the test must leave as it was."""
    path = Path(os.environ.get("HOME", "/root")) / ".claude.json"
    return path.read_bytes() if path.exists() else None


def test_claude_code_connects_with_the_printed_command() -> None:
    installed()
    before = machine_config()
    with local_env() as local:
        local.run("local", "start", str(local.root))
        home = local.root / "home"
        home.mkdir()
        printed = local.run("local", "mcp-config", "--client", "claude").stdout
        [command] = printed.splitlines()
        assert shlex.split(command)[:4] == ["claude", "mcp", "add-json", "zodex"]

        # As a person pastes it: one shell line, `claude` found on PATH.
        added = subprocess.run(
            ["bash", "-c", command],
            env=client_env(local, home),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=local.root,
        )
        assert added.returncode == 0, f"{command!r} exited {added.returncode}: {added.stderr}{added.stdout}"
        assert added.stdout.strip() == "Added stdio MCP server zodex to local config"
        # A server whose command cannot start, beside it: the health check can say no.
        broken = json.dumps({"type": "stdio", "command": str(local.root / "missing"), "args": []})
        assert claude(local, home, "mcp", "add-json", "broken", broken).returncode == 0

        lines = listed(local, home)
        assert CONNECTED in lines, lines
        assert any(line.startswith("broken: ") and line.endswith("✘ Failed to connect") for line in lines), (
            lines
        )

        # The entry names no address or token, so it survives a restart without an edit.
        config = (home / ".claude.json").read_text()
        assert "zodex" in json.loads(config)["projects"][str(local.root)]["mcpServers"]
        discovery = local.discovery()
        assert Path(discovery["mcp"]["token_path"]).read_text().strip() not in config
        assert discovery["mcp"]["url"] not in config
        local.run("local", "stop")
        local.run("local", "start", str(local.root))
        assert CONNECTED in listed(local, home)
    assert machine_config() == before


@pytest.mark.parametrize("name", ["claude-2.1.197", "claude-2.1.332"])
def test_the_stdio_and_http_entries_live_side_by_side(name: str) -> None:
    """Both printed lines, run as printed one after the other, add two servers (the HTTP one
    is `zodex-http`), and both connect."""
    installed()
    with local_env() as local:
        local.run("local", "start", str(local.root))
        client = Client(name, local, local.root / "home")
        client.configure("zodex", local.run("local", "mcp-config", "--client", "claude").stdout)
        client.configure(
            "zodex-http", local.run("local", "mcp-config", "--client", "claude", "--http").stdout
        )
        done = subprocess.run(
            ["claude", "mcp", "list"],
            env=client.env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=local.root,
        )
        assert done.returncode == 0, done.stderr
        url = local.discovery()["mcp"]["url"]
        assert CONNECTED in done.stdout.splitlines(), done.stdout
        assert f"zodex-http: {url} (HTTP) - ✔ Connected" in done.stdout.splitlines(), done.stdout
