"""Whole conversations of an outside client with a model stand-in: Claude Code (``claude -p``)
and Codex (``codex exec``), each configured with exactly what ``zodex local mcp-config``
prints, run as a person runs them, with a private HOME and nothing reached beyond loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.local import LocalEnv
from tests.support.model_standins import API_KEY, MODEL, AnthropicMessages, OpenAIResponses, serving
from tests.support.outside_clients import client_env, installed
from tests.support.tool_script import TOOLS, ToolScript

CONVERSATION_TIMEOUT = 180  # seconds for one whole conversation; each takes a few here
PROMPT = "Use the Zodex tools."
# The binary in the clients' bin directory for each client, as `<client>` names it.
BINARIES = {"claude-2.1.197": "claude", "claude-2.1.332": "claude-newest", "codex-0.171.0": "codex"}


@dataclass
class Conversation:
    """One client run: what it printed, and the stand-in's record of it."""

    done: subprocess.CompletedProcess[str]
    script: ToolScript
    requests: list[tuple[str, Any]]

    def explain(self) -> str:
        """Everything a reader needs when the conversation went wrong."""
        return (
            f"exit {self.done.returncode}\nstdout: {self.done.stdout[-3000:]}\nstderr: {self.done.stderr[-3000:]}\n"
            f"results: {json.dumps(self.script.transcript(), indent=1)}\n"
            f"requests: {[path for path, _ in self.requests]}\noffered: {self.script.offered[-1:]}"
        )


@dataclass
class Client:
    """A client named as in :data:`BINARIES`, its own bin directory first on PATH (so that a
    printed `claude …` line runs this very Claude Code) and its own HOME."""

    name: str
    local: LocalEnv
    home: Path

    def __post_init__(self) -> None:
        self.home.mkdir(exist_ok=True)
        self._bin = self.home.parent / f"bin-{self.name}"
        self._bin.mkdir(exist_ok=True)
        program = "codex" if self.is_codex else "claude"
        link = self._bin / program
        if not link.exists():
            link.symlink_to(installed() / BINARIES[self.name])

    @property
    def is_codex(self) -> bool:
        return self.name.startswith("codex")

    def env(self, **extra: str) -> dict[str, str]:
        env = client_env(self.local, self.home)
        env["PATH"] = f"{self._bin}{os.pathsep}{env['PATH']}"
        # Claude Code defers MCP tools behind its ToolSearch tool by default, which a model
        # would call first; off, so the stand-in is offered the tools themselves.
        env["ENABLE_TOOL_SEARCH"] = "false"
        env.update(extra)
        return env

    def configure(self, entry: str, printed: str) -> None:
        """Add the printed entry as a person would: run Claude's line in a shell, or put
        Codex's table in its config.toml (after the model provider, written per run)."""
        if self.is_codex:
            (self.home / ".codex").mkdir(exist_ok=True)
            (self.home / "entry.toml").write_text(printed)
            return
        added = subprocess.run(
            ["bash", "-c", printed],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.local.root,
        )
        kind = "http" if entry.endswith("-http") else "stdio"
        said = f"Added {kind} MCP server {entry} to local config"
        assert added.returncode == 0 and added.stdout.strip() == said, (
            added.returncode,
            added.stdout,
            added.stderr,
        )

    def converse(self, entry: str, workdir: Path, alias: str) -> Conversation:
        """One conversation in which the stand-in asks for every tool once."""
        # Codex names a server's tools after the entry with `-` made `_`.
        server = entry.replace("-", "_") if self.is_codex else entry
        script = ToolScript(server=server, workdir=str(workdir), alias=alias)
        with serving(script, OpenAIResponses if self.is_codex else AnthropicMessages) as standin:
            if self.is_codex:
                (self.home / ".codex" / "config.toml").write_text(
                    _codex_provider(standin.base_url) + (self.home / "entry.toml").read_text() + "\n"
                )
                argv = ["codex", "exec", "--skip-git-repo-check", PROMPT]
                env = self.env(STANDIN_API_KEY=API_KEY)
            else:
                # Claude Code asks before an MCP tool runs: these four are allowed ahead.
                allowed = ",".join(f"mcp__{entry}__{tool}" for tool in TOOLS)
                argv = ["claude", "-p", PROMPT, "--allowedTools", allowed, "--model", MODEL]
                env = self.env(ANTHROPIC_BASE_URL=standin.base_url, ANTHROPIC_API_KEY=API_KEY)
            done = subprocess.run(
                argv,
                env=env,
                capture_output=True,
                text=True,
                timeout=CONVERSATION_TIMEOUT,
                cwd=self.local.root,  # where the entry was added (Claude Code's entries are per project)
                stdin=subprocess.DEVNULL,
            )
        return Conversation(done, script, list(standin.requests))


def _codex_provider(base_url: str) -> str:
    # The model provider is the stand-in. The rest keeps Codex on loopback: without them it
    # looks up api.github.com (update check) and chatgpt.com (analytics, apps, plugins, model
    # discovery) at start, as strace shows.
    return f"""model = "{MODEL}"
model_provider = "standin"
check_for_update_on_startup = false

[model_providers.standin]
name = "Loopback stand-in"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "STANDIN_API_KEY"

[analytics]
enabled = false

[feedback]
enabled = false

[features]
apps = false
plugins = false
remote_plugin = false
plugin_sharing = false
api_key_model_discovery = false

"""
