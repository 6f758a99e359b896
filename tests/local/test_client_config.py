"""`zodex local mcp-config`: each client's own shape, parsed as that client parses it, naming
`zodex` by its absolute path (docs/modes.md#client-entries); and every command Zodex prints
for a person runs as printed (docs/modes.md#printed-commands)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support.local import ZODEX, LocalEnv, local_env

pytestmark = pytest.mark.timeout(90)

CONNECT = {"command": ZODEX, "args": ["local", "connect"]}


def mcp_config(local: LocalEnv, *args: str) -> tuple[str, str]:
    done = local.run("local", "mcp-config", *args)
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("# "), done.stderr
    return done.stdout, done.stderr


def claude_server(printed: str, name: str = "zodex") -> dict[str, object]:
    """What `claude mcp add-json <name> '<json>'` as printed hands to Claude Code."""
    words = shlex.split(printed)
    assert words[:4] == ["claude", "mcp", "add-json", name] and len(words) == 5, words
    server: dict[str, object] = json.loads(words[4])
    return server


def test_the_connect_entry_in_each_clients_shape() -> None:
    with local_env() as local:
        # Local's directories are not the default ones here: the entry carries them.
        connect = {**CONNECT, "env": location(local)}
        printed, where = mcp_config(local, "--client", "claude")
        assert claude_server(printed) == {"type": "stdio", **connect}
        assert "shell" in where

        printed, where = mcp_config(local, "--client", "codex")
        assert tomllib.loads(printed) == {"mcp_servers": {"zodex": connect}}
        assert "~/.codex/config.toml" in where

        printed, where = mcp_config(local, "--client", "cursor")
        assert json.loads(printed) == {"mcpServers": {"zodex": connect}}
        assert "mcp.json" in where

        for args in ((), ("--client", "json")):
            printed, _ = mcp_config(local, *args)
            assert json.loads(printed) == {"transport": "stdio", **connect}


def location(local: LocalEnv) -> dict[str, str]:
    env = local.env()
    return {name: env[name] for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME")}


def test_default_directories_put_no_env_in_the_entry(tmp_path: Path) -> None:
    """Unset, empty or relative (which XDG ignores): the bridge finds the same directories
    from HOME alone, so the entry names no variable."""
    with local_env() as local:
        for value in (None, "", "relative/state"):
            env = local.env(HOME=str(tmp_path))
            for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME"):
                env.pop(name)
                if value is not None:
                    env[name] = value
            for client in ("claude", "codex", "cursor", "json"):
                done = subprocess.run(
                    [ZODEX, "local", "mcp-config", "--client", client],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert done.returncode == 0, done.stderr
                assert (
                    '"env"' not in done.stdout and "env =" not in done.stdout and "XDG" not in done.stdout
                ), (value, client, done.stdout)


def test_the_entrys_env_finds_the_runtime_from_a_bare_environment(tmp_path: Path) -> None:
    """A client that passes its server only HOME and PATH (Codex, MCP's TypeScript SDK):
    the bridge started with the entry's env reaches the running runtime."""
    odd = tmp_path / "état 🙂"  # stays one TOML string
    with local_env() as local:
        state = odd / "state"
        env = local.env(XDG_STATE_HOME=str(state))
        subprocess.run(
            [ZODEX, "local", "start", str(tmp_path)], env=env, check=True, capture_output=True, timeout=60
        )
        try:
            printed = subprocess.run(
                [ZODEX, "local", "mcp-config", "--client", "codex"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            entry = tomllib.loads(printed)["mcp_servers"]["zodex"]
            assert entry["env"] == {"XDG_STATE_HOME": str(state), "XDG_CONFIG_HOME": env["XDG_CONFIG_HOME"]}
            bare = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **entry["env"]}
            request = [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": echo_call(tmp_path)},
            ]
            # stdin stays open until the answer: at end of input the bridge ends its calls.
            with subprocess.Popen(
                [entry["command"], *entry["args"]],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=bare,
                text=True,
            ) as bridge:
                assert bridge.stdin is not None and bridge.stdout is not None
                try:
                    bridge.stdin.write("".join(json.dumps(m) + "\n" for m in request))
                    bridge.stdin.flush()
                    replies = [json.loads(bridge.stdout.readline()) for _ in range(2)]
                finally:
                    bridge.kill()
            result = replies[1]["result"]
            assert result["isError"] is False, result
            assert result["structuredContent"]["output"] == "found\n"
        finally:
            subprocess.run([ZODEX, "local", "stop"], env=env, capture_output=True, timeout=60)


INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}


def echo_call(workdir: Path) -> dict[str, object]:
    return {"name": "exec_command", "arguments": {"cmd": "echo found", "workdir": str(workdir)}}


def test_the_http_entry_names_the_running_url_and_token(tmp_path: Path) -> None:
    with local_env() as local:
        refused = local.run("local", "mcp-config", "--http", check=False)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr == (
            f"error: Zodex Local is not running; start it with `{ZODEX} local start` "
            "(the HTTP entry names its URL and token)\n"
        )
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        url = discovery["mcp"]["url"]
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        headers = {"X-Zodex-Local-Token": token}
        # Its own name, so that a client holds it beside the stdio entry; "type" in every
        # JSON shape, which is how mcpServers readers such as Inspector's --config tell HTTP.
        server = {"type": "http", "url": url, "headers": headers}

        printed, _ = mcp_config(local, "--http", "--client", "claude")
        assert claude_server(printed, "zodex-http") == server
        printed, _ = mcp_config(local, "--http", "--client", "codex")
        assert tomllib.loads(printed) == {
            "mcp_servers": {"zodex-http": {"url": url, "http_headers": headers}}
        }
        printed, _ = mcp_config(local, "--http", "--client", "cursor")
        assert json.loads(printed) == {"mcpServers": {"zodex-http": server}}
        printed, _ = mcp_config(local, "--http")
        assert json.loads(printed) == {"transport": "streamable-http", **server}


def test_a_path_with_a_quote_stays_one_word_in_the_claude_command(tmp_path: Path) -> None:
    """The JSON goes in single quotes: a path holding one must still be passed whole."""
    odd = tmp_path / "it's here"
    odd.mkdir()
    (odd / "zodex").symlink_to(ZODEX)
    with local_env() as local:
        done = subprocess.run(
            [str(odd / "zodex"), "local", "mcp-config", "--client", "claude"],
            env=local.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert claude_server(done.stdout)["command"] == str(odd / "zodex")


def test_printed_commands_run_as_printed_from_a_relative_start(tmp_path: Path) -> None:
    """`.venv/bin/zodex local …` typed in the checkout, where `zodex` is not on PATH: what it
    prints names the absolute path, and pasting it into another directory works."""
    checkout = Path(ZODEX).parents[2]
    relative = os.path.relpath(ZODEX, checkout)
    with local_env() as local:
        env = local.env(PATH="/usr/bin:/bin")
        status = subprocess.run(
            [relative, "local", "status"], env=env, capture_output=True, text=True, timeout=60, cwd=checkout
        )
        assert status.stdout == f"Zodex Local is not running. Start it with `{ZODEX} local start`.\n"
        # Each command is pasted exactly as printed, in another directory (the one to start in).
        started = subprocess.run(
            ["/bin/sh", "-c", printed_command(status.stdout)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert started.returncode == 0, started.stderr
        assert f"start directory: {tmp_path}" in started.stdout
        assert f"never (stop with `{ZODEX} local stop`)" in started.stdout
        connect = re.search(r"Connect a client: `([^`]+)`", started.stdout)
        assert connect is not None, started.stdout
        assert connect.group(1) == f"{ZODEX} local mcp-config --client claude"
        entry = subprocess.run(
            ["/bin/sh", "-c", connect.group(1)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert entry.returncode == 0, entry.stderr
        assert claude_server(entry.stdout)["command"] == ZODEX
        stop = re.search(r"`([^`]+)`\)", started.stdout)
        assert stop is not None and stop.group(1) == f"{ZODEX} local stop"
        stopped = subprocess.run(
            ["/bin/sh", "-c", stop.group(1)], env=env, capture_output=True, text=True, timeout=60, cwd="/"
        )
        assert stopped.stdout == "Zodex Local stopped.\n"


def printed_command(line: str) -> str:
    """The one command a line of output puts between backticks."""
    commands = re.findall(r"`([^`]+)`", line)
    assert len(commands) == 1, line
    return str(commands[0])
