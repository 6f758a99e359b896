"""MCP clients nobody here wrote — MCP Inspector's CLI, Claude Code's CLI (two versions) and
Codex's CLI — installed by scripts/outside_clients.sh at the versions
tests/outside_clients/package-lock.json pins, and run as a person would run them, each with a
private HOME so the machine's config is untouched."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.local import ZODEX, LocalEnv, observer_bearer

REPO = Path(__file__).resolve().parents[2]
INSTALLER = REPO / "scripts" / "outside_clients.sh"
BIN = REPO / ".cache" / "outside-clients" / "node_modules" / ".bin"
NPM_UNREACHABLE = 3  # the installer's exit status when npm or its registry is missing
TIMEOUT = 45  # seconds for one client run; each takes about half a second here


@functools.cache
def _install() -> tuple[int, str]:
    done = subprocess.run([str(INSTALLER)], capture_output=True, text=True, timeout=600, cwd=REPO)
    return done.returncode, (done.stderr + done.stdout).strip()


def installed() -> Path:
    """The clients' bin directory (Node 22 first on a PATH built from it). Skips only when
    npm cannot reach its registry; any other failed install fails the test."""
    status, said = _install()
    if status == NPM_UNREACHABLE:
        pytest.skip(f"outside MCP clients not installed: {said}")
    if status != 0:
        pytest.fail(f"scripts/outside_clients.sh exited {status}: {said}")
    return BIN


def client_env(local: LocalEnv, home: Path) -> dict[str, str]:
    """The environment a person's shell would give a client: Local's XDG directories, a
    private HOME, the pinned Node first on PATH, and no traffic beyond loopback."""
    return local.env(
        HOME=str(home),
        PATH=f"{installed()}{os.pathsep}{os.environ.get('PATH', '')}",
        # Claude Code: no update checks, telemetry or error reports, and its API "preconnect"
        # (a lookup of api.anthropic.com at every start, seen with strace) aimed at loopback.
        DISABLE_AUTOUPDATER="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        ANTHROPIC_BASE_URL="http://127.0.0.1:9",
    )


@dataclass
class Inspector:
    """`mcp-inspector --cli`, aimed at Zodex Local over HTTP or through `zodex local connect`."""

    local: LocalEnv
    home: Path
    transport: str  # "http" or "connect"

    def argv(self, method: list[str]) -> list[str]:
        # --tool-arg and --header take every word up to the next option, and after "--"
        # everything is the server's command line: so the URL goes first, the command last.
        inspector = [str(installed() / "mcp-inspector"), "--cli"]
        if self.transport == "http":
            discovery = self.local.discovery()
            token = Path(discovery["mcp"]["token_path"]).read_text().strip()
            url = discovery["mcp"]["url"]
            return [
                *inspector,
                url,
                *method,
                "--transport",
                "http",
                "--header",
                f"X-Zodex-Local-Token: {token}",
            ]
        # Inspector gives a server it spawns only a few variables (PATH, HOME, …), so Local's
        # directories go with -e, as a person with non-default XDG directories would pass them.
        forwarded = ["XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"]
        env = self.local.env()
        pairs = [arg for name in forwarded for arg in ("-e", f"{name}={env[name]}")]
        return [*inspector, *method, *pairs, "--", ZODEX, "local", "connect"]

    def run(self, *method: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(list(method)),
            env=client_env(self.local, self.home),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=self.local.root,
        )

    def call(self, tool: str, **args: str | int) -> dict[str, Any]:
        """One tools/call; its structured result, checked for success."""
        pairs = [f"{key}={value}" for key, value in args.items()]
        done = self.run("--method", "tools/call", "--tool-name", tool, "--tool-arg", *pairs)
        assert done.returncode == 0, (
            f"{tool} via {self.transport}: exit {done.returncode}: {done.stderr}{done.stdout}"
        )
        result: dict[str, Any] = json.loads(done.stdout)
        assert result["isError"] is False, result
        structured: dict[str, Any] = result.get("structuredContent") or {"text": result["content"][0]["text"]}
        return structured


def observer_get(local: LocalEnv, path: str) -> Any:
    """A GET on the running runtime's observer API, with its bearer."""
    base = local.discovery()["observability"]["base_url"]
    response = httpx2.get(
        f"{base}{path}", headers={"Authorization": f"Bearer {observer_bearer(local)}"}, timeout=10
    )
    response.raise_for_status()
    return response.json()
