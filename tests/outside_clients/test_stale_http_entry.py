"""A pasted HTTP entry whose token was rotated: what Claude Code and MCP Inspector tell the
person. The runtime's 401 and its answers to their OAuth probes name
`zodex local mcp-config --http`, so the clients that show a reason show that one instead of
an OAuth registration failure (docs/modes.md#mcp-endpoint)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest

from tests.support.conversations import Client
from tests.support.local import ZODEX, LocalEnv, local_env
from tests.support.outside_clients import TIMEOUT, Inspector, client_env, installed

pytestmark = pytest.mark.timeout(180)

REFUSAL = f"missing or invalid token; print this runtime's HTTP entry with `{ZODEX} local mcp-config --http`"


def rotated(local: LocalEnv) -> None:
    local.run("local", "stop")
    local.run("local", "setup", "--rotate-token")
    local.run("local", "start", str(local.root))


def test_claude_code_shows_the_refusal_for_a_stale_entry() -> None:
    installed()
    with local_env() as local:
        local.run("local", "start", str(local.root))
        printed = local.run("local", "mcp-config", "--client", "claude", "--http").stdout
        clients = {
            name: Client(name, local, local.root / f"home-{name}")
            for name in ("claude-2.1.197", "claude-2.1.332")
        }
        for client in clients.values():
            client.configure("zodex-http", printed)
        rotated(local)
        url = local.discovery()["mcp"]["url"]
        lines = {}
        for name, client in clients.items():
            done = subprocess.run(
                ["claude", "mcp", "list"],
                env=client.env(),
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                cwd=local.root,
            )
            assert done.returncode == 0, done.stderr
            [line] = [line for line in done.stdout.splitlines() if line.startswith("zodex-http: ")]
            lines[name] = line
        # The newest Claude Code shows the reason the registration probe gave; the first
        # tested shows no reason at all.
        answer = json.dumps({"error": "invalid_request", "error_description": REFUSAL}, separators=(",", ":"))
        assert lines["claude-2.1.332"] == (
            f"zodex-http: {url} (HTTP) - ✘ Failed to connect — Dynamic Client Registration rejected (HTTP 400): {answer}"
        )
        assert lines["claude-2.1.197"] == f"zodex-http: {url} (HTTP) - ✘ Failed to connect"


def test_inspector_shows_the_refusal_in_a_terminal(tmp_path: Path) -> None:
    installed()
    with local_env() as local:
        local.run("local", "start", str(local.root))
        home = local.root / "home"
        home.mkdir()
        inspector = Inspector(local, home, "http")
        argv = inspector.argv(["--method", "tools/list"])  # the token of this start
        rotated(local)
        argv = [local.discovery()["mcp"]["url"] if arg.startswith("http://") else arg for arg in argv]
        # Without a terminal Inspector refuses to start OAuth at all, reason unseen.
        piped = subprocess.run(
            argv, env=client_env(local, home), capture_output=True, text=True, timeout=TIMEOUT, cwd=local.root
        )
        assert piped.returncode != 0
        [said] = [line for line in piped.stderr.splitlines() if line.startswith("{")]
        assert json.loads(said)["error"]["code"] == "auth_required", piped.stderr
        # In a terminal, as a person runs it, its OAuth attempt ends on the refusal (stderr).
        shown = in_terminal(argv, client_env(local, home), local.root)
        assert "Dynamic Client Registration rejected (HTTP 400): " in shown, shown
        assert REFUSAL.replace("`", "") in shown.replace("\\", "").replace("`", ""), shown


def in_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """What ``argv`` writes with a terminal for stdin and stdout, its stderr piped."""
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            argv,
            env=env,
            stdin=terminal,
            stdout=terminal,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
            cwd=cwd,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    return done.stderr
