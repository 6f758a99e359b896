"""A throwaway Sprite per test: unique account names, every path in a tmp tree the accounts
can traverse, removed with its accounts and their processes whatever happens."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.accounts import kill_processes_of
from tests.support.second_user import world_tree_dir
from tests.support.slowdown import scaled

ZODEX = str(Path(sys.executable).parent / "zodex")


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("Sprite's operator commands make accounts and chown files: they need root")
    missing = [
        tool for tool in ("useradd", "userdel", "groupadd", "groupdel", "runuser") if not shutil.which(tool)
    ]
    if missing:
        pytest.fail(f"running as root but {', '.join(missing)} missing: install passwd and util-linux")


def _uid(name: str) -> int | None:
    done = subprocess.run(["id", "-u", name], capture_output=True, text=True, check=False)
    return int(done.stdout) if done.returncode == 0 else None


def remove_account(name: str) -> None:
    uid = _uid(name)
    if uid is not None:
        kill_processes_of(uid)
        subprocess.run(["userdel", "--remove", "--force", name], capture_output=True, check=False)


def remove_group(name: str) -> None:
    subprocess.run(["groupdel", name], capture_output=True, check=False)


@dataclass
class Sprite:
    """Names and paths of one throwaway Sprite, and ``zodex sprite`` run against it."""

    root: Path
    tag: str

    @property
    def agent(self) -> str:
        return f"zsp{self.tag}-a"

    @property
    def service(self) -> str:
        return f"zsp{self.tag}-s"

    @property
    def group(self) -> str:
        return f"zsp{self.tag}-g"

    @property
    def config(self) -> Path:
        return self.root / "etc" / "config.toml"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def install(self) -> Path:
        return self.root / "opt"

    @property
    def home(self) -> Path:
        return self.root / "home" / self.agent

    @property
    def key_file(self) -> Path:
        return self.state / "key"

    def setup_args(self, port: int = 18080) -> list[str]:
        return [
            "--agent-user",
            self.agent,
            "--service-user",
            self.service,
            "--group",
            self.group,
            "--agent-home",
            str(self.home),
            "--workspace",
            str(self.workspace),
            "--state-dir",
            str(self.state),
            "--runtime-dir",
            str(self.root / "run"),
            "--install-dir",
            str(self.install),
            "--address",
            "127.0.0.1",
            "--port",
            str(port),
            "--public-url",
            f"http://sprite.test:{port}",
        ]

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ZODEX, "sprite", args[0], "--config", str(self.config), *args[1:]],
            capture_output=True,
            text=True,
            check=False,
            timeout=scaled(120),
            env=env,
        )

    def setup(self, *extra: str, port: int = 18080) -> subprocess.CompletedProcess[str]:
        return self.run("setup", *self.setup_args(port), *extra)

    def as_agent(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", self.agent, "--", *argv], capture_output=True, text=True, check=False, cwd="/"
        )


@pytest.fixture
def sprite(request: pytest.FixtureRequest) -> Iterator[Sprite]:
    _require_root()
    with world_tree_dir(request.node.name[:40]) as root:
        made = Sprite(root, secrets.token_hex(4))
        try:
            yield made
        finally:
            remove_account(made.agent)
            remove_account(made.service)
            remove_group(made.group)
            remove_group(made.agent)  # the agent's own group, when userdel left it


@pytest.fixture
def ready_sprite(sprite: Sprite) -> Sprite:
    """A Sprite after a successful setup."""
    done = sprite.setup()
    assert done.returncode == 0, done.stderr
    return sprite
