"""A real Sprite wired to the GitHub stand-in: a throwaway publisher account running the real
publisher, the agent's git config and commands written by the same functions setup uses,
and the model's commands sent through MCP ``exec_command``. Everything is removed whatever
happens: the publisher stopped, its account and the Sprite's deleted."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession

from tests.sprite.serve.sprite_support import Sprite, sprite_setup, tool_json
from tests.support.accounts import Account, throwaway_account
from tests.support.github_standin import App, GitHub, github_standin
from tests.support.slowdown import scaled
from tests.support.waiting import wait_until
from zodex_gateway.sprite.github.provision import (
    configure_agent_git,
    publisher_argv,
    write_agent_commands,
    write_publisher_dir,
)
from zodex_gateway.sprite.github.state import PublisherDir

READER_ID, READER_INSTALLATION = 11, 111
WRITER_ID, WRITER_INSTALLATION = 22, 222
REPOS = ("acme/widgets", "acme/gadgets")
WRITER_PERMISSIONS = {"contents": "write", "pull_requests": "write", "workflows": "write", "metadata": "read"}


@dataclass
class Rig:
    sprite: Sprite
    hub: GitHub
    publisher: Account
    directory: Path
    socket: Path
    reader: App
    writer: App
    process: subprocess.Popen[bytes] | None = None
    log: list[str] = field(default_factory=list)

    @property
    def state(self) -> PublisherDir:
        return PublisherDir(self.directory)

    @property
    def owner(self) -> tuple[int, int]:
        return (self.publisher.uid, self.publisher.gid)

    def settings(self) -> dict[str, Any]:
        return {
            "api_url": self.hub.url,
            "web_url": self.hub.url,
            "reader_app_id": READER_ID,
            "reader_installation_id": READER_INSTALLATION,
            "publisher_app_id": WRITER_ID,
            "publisher_client_id": self.writer.client_id,
            "agent_uids": [self.sprite.agent.uid],
            "default_base": "main",
            "max_push_bytes": 2 * 1024 * 1024,
        }

    def start_publisher(self) -> None:
        self.socket.unlink(missing_ok=True)
        argv = publisher_argv(self.sprite.python, self.directory, self.socket)
        self.process = subprocess.Popen(
            ["/usr/sbin/runuser", "-u", self.publisher.name, "--", *argv],
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd="/",
        )
        self._drainer = threading.Thread(target=self._drain, args=(self.process,), daemon=True)
        self._drainer.start()
        wait_until(self._listening, timeout=30, what="the publisher's socket")

    def _drain(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.log.append(line.decode(errors="replace"))

    def _listening(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the publisher exited ({self.process.returncode}): {''.join(self.log)}")
        return self.socket.exists()

    def publisher_pid(self) -> int:
        done = subprocess.run(["pgrep", "-u", str(self.publisher.uid), "-f", "sprite.github.publisher"],
                              capture_output=True, text=True, check=False)  # fmt: skip
        return int(done.stdout.split()[0])

    def stop_publisher(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self._drainer.join(timeout=10)
        assert self.process.stderr is not None
        self.process.stderr.close()


@contextlib.contextmanager
def github_sprite() -> Iterator[Rig]:
    with (
        sprite_setup() as sprite,
        throwaway_account("zp", shell="/usr/sbin/nologin") as publisher,
        github_standin(sprite.base / "hub") as hub,
    ):
        for repo in (*REPOS, "other/thing"):
            hub.add_repo(repo)
        reader = hub.add_app(READER_ID, "zodex-reader", {"contents": "read", "metadata": "read"})
        writer = hub.add_app(WRITER_ID, "zodex-writer", WRITER_PERMISSIONS)
        hub.install(reader, READER_INSTALLATION, "acme", set(REPOS))
        hub.install(writer, WRITER_INSTALLATION, "acme", set(REPOS))
        run_dir = sprite.base / "publisher-run"
        run_dir.mkdir(mode=0o755)
        import os

        os.chown(run_dir, publisher.uid, publisher.gid)
        rig = Rig(sprite, hub, publisher, sprite.base / "publisher", run_dir / "socket", reader, writer)
        assert hub.ca_file is not None
        write_publisher_dir(rig.directory, rig.owner, rig.settings(), reader.private_key, writer.private_key,
                            hub.ca_file.read_bytes())  # fmt: skip
        rig.state.write_file("publisher-client-secret", writer.client_secret.encode(), rig.owner)
        bin_dir = sprite.python.parent
        write_agent_commands(bin_dir, sprite.python)
        agent = sprite.agent
        profile = agent.home / ".profile"
        with profile.open("a") as out:
            out.write(f'\nexport PATH="{bin_dir}:$PATH"\n')
        configure_agent_git(agent.home, agent.uid, agent.gid, rig.socket)
        subprocess.run(
            ["/usr/sbin/runuser", "-u", agent.name, "--", "git", "config", "--global", "user.email", "agent@example.invalid"],
            check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(agent.home)},
        )  # fmt: skip
        subprocess.run(
            ["/usr/sbin/runuser", "-u", agent.name, "--", "git", "config", "--global", "user.name", "Agent"],
            check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(agent.home)},
        )  # fmt: skip
        try:
            rig.start_publisher()
            yield rig
        finally:
            rig.stop_publisher()


async def run(mcp: ClientSession, cmd: str, workdir: str, limit: float = 300) -> tuple[int, str]:
    """One command as the model would send it, polled with write_stdin until it ends."""
    deadline = time.monotonic() + scaled(limit)
    result = tool_json(
        await mcp.call_tool("exec_command", {"cmd": cmd, "workdir": workdir, "yield_time_ms": 20000})
    )
    output = str(result["output"])
    while result["status"] == "running":
        assert time.monotonic() < deadline, f"{cmd!r} still running: {output[-2000:]}"
        handle = result["session_handle"]
        result = tool_json(
            await mcp.call_tool("write_stdin", {"session_handle": handle, "yield_time_ms": 20000})
        )
        output += str(result["output"])
    return int(result["exit_code"]), output
