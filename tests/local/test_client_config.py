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


def claude_server(printed: str) -> dict[str, object]:
    """What `claude mcp add-json zodex '<json>'` as printed hands to Claude Code."""
    words = shlex.split(printed)
    assert words[:4] == ["claude", "mcp", "add-json", "zodex"] and len(words) == 5, words
    server: dict[str, object] = json.loads(words[4])
    return server


def test_the_connect_entry_in_each_clients_shape() -> None:
    with local_env() as local:
        printed, where = mcp_config(local, "--client", "claude")
        assert claude_server(printed) == {"type": "stdio", **CONNECT}
        assert "shell" in where

        printed, where = mcp_config(local, "--client", "codex")
        assert tomllib.loads(printed) == {"mcp_servers": {"zodex": CONNECT}}
        assert "~/.codex/config.toml" in where

        printed, where = mcp_config(local, "--client", "cursor")
        assert json.loads(printed) == {"mcpServers": {"zodex": CONNECT}}
        assert "mcp.json" in where

        for args in ((), ("--client", "json")):
            printed, _ = mcp_config(local, *args)
            assert json.loads(printed) == {"transport": "stdio", **CONNECT}


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

        printed, _ = mcp_config(local, "--http", "--client", "claude")
        assert claude_server(printed) == {"type": "http", "url": url, "headers": headers}
        printed, _ = mcp_config(local, "--http", "--client", "codex")
        assert tomllib.loads(printed) == {"mcp_servers": {"zodex": {"url": url, "http_headers": headers}}}
        printed, _ = mcp_config(local, "--http", "--client", "cursor")
        assert json.loads(printed) == {"mcpServers": {"zodex": {"url": url, "headers": headers}}}
        printed, _ = mcp_config(local, "--http")
        assert json.loads(printed) == {"transport": "streamable-http", "url": url, "headers": headers}


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
        assert status.stdout == f"Zodex Local is not running. Start it with `{ZODEX} local start [PATH]`.\n"
        printed = re.search(r"`([^`]+) \[PATH\]`", status.stdout)
        assert printed is not None
        started = subprocess.run(
            ["/bin/sh", "-c", f"{printed.group(1)} {shlex.quote(str(tmp_path))}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=local.root,
        )
        assert started.returncode == 0, started.stderr
        assert f"never (stop with `{ZODEX} local stop`)" in started.stdout
        assert f"`{ZODEX} local mcp-config --client claude|codex|cursor|json`" in started.stdout
        entry = subprocess.run(
            [relative, "local", "mcp-config", "--client", "claude"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=checkout,
        )
        assert claude_server(entry.stdout)["command"] == ZODEX
        stop = re.search(r"`([^`]+)`\)", started.stdout)
        assert stop is not None and stop.group(1) == f"{ZODEX} local stop"
        stopped = subprocess.run(
            ["/bin/sh", "-c", stop.group(1)], env=env, capture_output=True, text=True, timeout=60, cwd="/"
        )
        assert stopped.stdout == "Zodex Local stopped.\n"
