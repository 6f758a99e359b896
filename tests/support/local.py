"""Run the real `zodex` CLI against private XDG directories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.gateway import VENV_BIN, Mcp, http_client
from tests.support.slowdown import scaled

ZODEX = str(VENV_BIN / "zodex")


@dataclass
class LocalEnv:
    root: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("ZODEX_LIMITS", None)
        env.update(
            XDG_STATE_HOME=str(self.root / "state"),
            XDG_CONFIG_HOME=str(self.root / "config"),
            XDG_RUNTIME_DIR=str(self.root / "run"),
            SHELL="/bin/bash",
        )
        env.update(extra)
        return env

    def run(self, *args: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [ZODEX, *args],
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=scaled(60),
            cwd=self.root,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"zodex {' '.join(args)} exited {done.returncode}: {done.stderr}{done.stdout}"
            )
        return done

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.run("local", "status", "--json").stdout)
        return data

    @property
    def discovery_file(self) -> Path:
        return self.root / "state" / "zodex" / "local" / "runtime" / "discovery.json"

    def discovery(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.discovery_file.read_text())
        return data


def observer_bearer(local: LocalEnv) -> str:
    """The running runtime's observer bearer, read where discovery says it is."""
    return Path(local.discovery()["observability"]["bearer_token_path"]).read_text().strip()


@asynccontextmanager
async def connected(local: LocalEnv) -> AsyncIterator[Mcp]:
    """A real MCP client on the running runtime, over HTTP with its token."""
    discovery = local.discovery()
    token = Path(discovery["mcp"]["token_path"]).read_text().strip()
    async with http_client(discovery["mcp"]["url"], {"X-Zodex-Local-Token": token}) as mcp:
        yield mcp


@contextmanager
def local_env() -> Iterator[LocalEnv]:
    root = Path(tempfile.mkdtemp(prefix="zl"))
    (root / "run").mkdir(mode=0o700)
    env = LocalEnv(root)
    try:
        yield env
    finally:
        env.run("local", "stop", check=False)
        shutil.rmtree(root, ignore_errors=True)
