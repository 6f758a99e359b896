"""``zodex sprite github setup``, ``yolo``, ``default`` and ``status`` as root against a real
Sprite and the stand-in: the checks against GitHub come first and a refused setup changes
nothing; once set up, the model's git works through the publisher setup configured."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sprite.github.github_support import (
    READER_ID,
    READER_INSTALLATION,
    REPOS,
    WRITER_ID,
    WRITER_PERMISSIONS,
    run,
)
from tests.sprite.serve.sprite_support import Sprite, sprite_setup
from tests.support.accounts import kill_processes_of, require_root
from tests.support.github_standin import GitHub, github_standin, new_private_key_pem
from tests.support.waiting import wait_until
from zodex_gateway.sprite.github.state import PublisherDir

ZODEX = str(Path(sys.executable).parent / "zodex")


@dataclass
class Operator:
    sprite: Sprite
    hub: GitHub
    publisher_user: str
    keys: dict[str, Path]

    @property
    def publisher_dir(self) -> Path:
        return self.sprite.base / "publisher"

    @property
    def socket(self) -> Path:
        return self.sprite.base / "publisher-run" / "socket"

    @property
    def bin_dir(self) -> Path:
        return self.sprite.base / "bin"

    def state_grant_token(self, repo: str) -> str:
        grant = PublisherDir(self.publisher_dir).grant(repo, time.time())
        assert grant is not None
        return grant.token

    def zodex(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ZODEX, "sprite", "github", args[0], "--config", str(self.sprite.config), *args[1:]],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip

    def setup_args(self, **overrides: str) -> list[str]:
        assert self.hub.ca_file is not None
        flags = {
            "--reader-app-id": str(READER_ID),
            "--reader-installation-id": str(READER_INSTALLATION),
            "--reader-key": str(self.keys["reader"]),
            "--publisher-app-id": str(WRITER_ID),
            "--publisher-client-id": self.hub.apps[WRITER_ID].client_id,
            "--publisher-key": str(self.keys["writer"]),
            "--api-url": self.hub.url,
            "--web-url": self.hub.url,
            "--ca-file": str(self.hub.ca_file),
            "--publisher-user": self.publisher_user,
            "--publisher-dir": str(self.publisher_dir),
            "--socket": str(self.socket),
            "--bin-dir": str(self.bin_dir),
            "--publisher-client-secret-file": str(self.keys["secret"]),
            **overrides,
        }
        return [word for pair in flags.items() for word in pair]


def _remove_account(name: str) -> None:
    done = subprocess.run(["id", "-u", name], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        kill_processes_of(int(done.stdout))
        subprocess.run(["userdel", "--force", name], capture_output=True, check=False)
    subprocess.run(["groupdel", name], capture_output=True, check=False)


@pytest.fixture
def operator() -> Iterator[Operator]:
    require_root()
    name = f"zpub{secrets.token_hex(4)}"
    with sprite_setup() as sprite, github_standin(sprite.base / "hub") as hub:
        for repo in REPOS:
            hub.add_repo(repo)
        reader = hub.add_app(READER_ID, "zodex-reader", {"contents": "read", "metadata": "read"})
        writer = hub.add_app(WRITER_ID, "zodex-writer", WRITER_PERMISSIONS)
        hub.install(reader, READER_INSTALLATION, "acme", set(REPOS))
        hub.install(writer, 222, "acme", set(REPOS))
        keys = {"reader": sprite.base / "reader.pem", "writer": sprite.base / "writer.pem"}
        keys["reader"].write_bytes(reader.private_key)
        keys["writer"].write_bytes(writer.private_key)
        keys["secret"] = sprite.base / "client-secret"
        keys["secret"].write_text(writer.client_secret + "\n")
        with (sprite.agent.home / ".profile").open("a") as profile:
            profile.write(f'\nexport PATH="{sprite.base / "bin"}:$PATH"\n')
            profile.write("export GIT_AUTHOR_NAME=Agent GIT_COMMITTER_NAME=Agent\n")
            profile.write(
                "export GIT_AUTHOR_EMAIL=agent@example.invalid GIT_COMMITTER_EMAIL=agent@example.invalid\n"
            )
        try:
            yield Operator(sprite, hub, name, keys)
        finally:
            _remove_account(name)


@contextlib.contextmanager
def publisher_from(setup_output: str) -> Iterator[subprocess.Popen[bytes]]:
    """The publisher, started the way setup's output says to when systemd is not PID 1."""
    line = next(
        line for line in setup_output.splitlines() if "run this under the host's supervisor as" in line
    )
    user, _, command = line.partition(" as ")[2].partition(": ")
    process = subprocess.Popen(
        ["/usr/sbin/runuser", "-u", user, "--", *shlex.split(command)],
        env={"PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    drained: list[bytes] = []
    drain = threading.Thread(target=lambda: drained.extend(process.stderr or []), daemon=True)
    drain.start()
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)
        drain.join(timeout=10)
        process.stderr.close()


def sprite_status(op: Operator) -> dict[str, Any]:
    """``zodex sprite status --json`` (it exits 1 while the service is not running)."""
    done = subprocess.run(
        [ZODEX, "sprite", "status", "--json", "--config", str(op.sprite.config)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def snapshot(op: Operator) -> tuple[str, bool, bool, bool]:
    exists = subprocess.run(["id", "-u", op.publisher_user], capture_output=True, check=False).returncode == 0
    return (op.sprite.config.read_text(), op.publisher_dir.exists(), op.bin_dir.exists(), exists)


def test_bad_setup_input_is_refused_and_changes_nothing(operator: Operator) -> None:
    before = snapshot(operator)
    stranger = operator.sprite.base / "stranger.pem"
    stranger.write_bytes(new_private_key_pem())
    not_a_key = operator.sprite.base / "not-a-key.pem"
    not_a_key.write_text("hello there\n")
    refusals = {
        (("--reader-key", str(stranger)),): "GitHub App lookup failed (401)",
        (("--publisher-key", str(not_a_key)),): "is not a PEM private key",
        (("--reader-key", "/nonexistent.pem"),): "No such file or directory",
        (("--publisher-client-id", "Iv1.wrong"),): "client id Iv1.wrong does not belong to the writer App 22",
        (("--reader-installation-id", "999"),): "GitHub installation lookup failed (404)",
        (("--reader-app-id", "abc"),): "github.reader-app-id must be a positive integer",
        (("--api-url", "http://plain.example"),): "github.api-url must be an https:// URL",
        (("--default-base", "a..b"),): "github.default-base must be a branch name",
        (("--publisher-dir", "relative"),): "github.publisher-dir must be an absolute path",
        (("--publisher-client-secret-file", str(not_a_key)),): "does not hold a client secret",
    }
    for pairs, message in refusals.items():
        done = operator.zodex("setup", *operator.setup_args(**dict(pairs)))
        assert done.returncode == 1 and message in done.stderr, (pairs, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert snapshot(operator) == before, pairs


def test_setup_never_writes_through_the_agents_gitconfig_link(operator: Operator) -> None:
    target = operator.sprite.base / "root-owned.conf"
    target.write_text("# root's\n")
    link = operator.sprite.agent.home / ".gitconfig"
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    os.lchown(link, operator.sprite.agent.uid, operator.sprite.agent.gid)
    done = operator.zodex("setup", *operator.setup_args())
    assert done.returncode == 1 and "git config of the agent's" in done.stderr, done
    assert target.read_text() == "# root's\n"


async def test_setup_then_the_model_clones_publishes_and_pushes_under_yolo(operator: Operator) -> None:
    done = operator.zodex("setup", *operator.setup_args())
    assert done.returncode == 0, done.stderr
    again = operator.zodex("setup", *operator.setup_args())
    assert again.returncode == 0, again.stderr
    config = operator.sprite.config.read_text()
    assert "[github]" in config and f'api-url = "{operator.hub.url}"' in config
    assert "PRIVATE KEY" not in config
    assert oct(operator.publisher_dir.stat().st_mode & 0o777) == "0o700"
    for path in operator.publisher_dir.iterdir():
        assert path.stat().st_mode & 0o077 == 0, path
    status = operator.zodex("status")
    assert "github-mode: default" in status.stdout, status
    assert sprite_status(operator)["github"] == {
        "mode": "default",
        "publisher_socket": False,
        "push_grants": 0,
    }
    workspace = str(operator.sprite.workspace)
    with publisher_from(again.stdout):
        wait_until(operator.socket.exists, timeout=30, what="the publisher's socket")
        assert "publisher-socket: " in operator.zodex("status").stdout
        async with operator.sprite.mcp() as mcp:
            code, output = await run(
                mcp,
                "git clone -q https://github.com/acme/widgets && cd widgets && git commit -q --allow-empty -m x"
                " && zodex-agent github publish-pr --repo acme/widgets --title 'From setup'",
                workspace,
            )
            assert code == 0 and "publish-pr: created" in output, output
            assert operator.hub.pulls[-1].title == "From setup"
            code, output = await run(mcp, "git push origin HEAD:refs/heads/direct", f"{workspace}/widgets")
            assert code != 0 and "direct push is not enabled" in output, output
            yolo = operator.zodex("yolo", "--repo", "acme/widgets", "--ttl", "1h")
            assert yolo.returncode == 0 and "github-mode: yolo" in yolo.stdout, yolo
            assert "repo: acme/widgets" in yolo.stdout
            code, output = await run(mcp, "git push -q origin HEAD:refs/heads/direct", f"{workspace}/widgets")
            assert code == 0, output
            assert "refs/heads/direct" in operator.hub.refs("acme/widgets")
            assert "repo-expires-at: acme/widgets" in operator.zodex("status").stdout
            told = sprite_status(operator)["github"]
            assert (told["mode"], told["publisher_socket"]) == ("yolo", True), told
            assert operator.zodex("yolo", "--repo", "../x").returncode == 1
            assert operator.zodex("yolo", "--ttl", "5x").stderr.startswith("error: unsupported TTL unit `x`")
            default = operator.zodex("default")
            assert default.returncode == 0 and "github-mode: default" in default.stdout
            code, output = await run(mcp, "git push origin HEAD:refs/heads/after", f"{workspace}/widgets")
            assert code != 0 and "direct push is not enabled" in output, output
            # The operator's grant: Device Flow approved by a person, then the model's push works.
            granting = subprocess.Popen(
                [ZODEX, "sprite", "github", "grant-push", "--config", str(operator.sprite.config),
                 "--repo", "acme/widgets", "--ttl", "10m"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert granting.stdout is not None
            first = [granting.stdout.readline(), granting.stdout.readline()]
            assert first[0].startswith("verification-uri: "), first
            operator.hub.approve(first[1].removeprefix("user-code: ").strip(), {"acme/widgets"})
            rest, errors = granting.communicate(timeout=60)
            assert granting.returncode == 0 and "grant-push: active" in rest, (rest, errors)
            listed = operator.zodex("list-grants")
            assert "grant: acme/widgets state=active" in listed.stdout and "source=operator" in listed.stdout
            assert "ghu_" not in listed.stdout
            code, output = await run(mcp, "git push -q origin HEAD:refs/heads/after", f"{workspace}/widgets")
            assert code == 0, output
            token = operator.state_grant_token("acme/widgets")
            revoked = operator.zodex("revoke-push", "--repo", "acme/widgets")
            assert "revoke-push: revoked" in revoked.stdout and "github-revocation: done" in revoked.stdout, (
                revoked
            )
            assert token in operator.hub.revoked
            code, output = await run(mcp, "git push origin HEAD:refs/heads/after2", f"{workspace}/widgets")
            assert code != 0 and "direct push is not enabled" in output, output
