"""A real ``zodex sprite serve`` on loopback for tests: throwaway service and agent
accounts, config and state in temporary directories (never ``/etc``), the service started
as a subprocess through the CLI, and everything removed afterwards — the service stopped,
every process of both accounts killed, the accounts deleted."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.accounts import Account, processes_of, runnable_install, throwaway_account
from tests.support.slowdown import scaled
from tests.support.waiting import wait_until
from zodex_gateway.sprite.key import new_key, write_key

MARKER = "ZODEX_TEST_SERVICE_MARKER"
MARKER_VALUE = "service-env-must-not-leak"


@dataclass
class Sprite:
    service: Account
    agent: Account
    base: Path
    python: Path
    key: str
    port: int = 0
    process: subprocess.Popen[str] | None = None
    tls: tuple[Path, Path] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.base / "etc" / "config.toml"

    @property
    def state_dir(self) -> Path:
        return self.base / "state"

    @property
    def key_file(self) -> Path:
        return self.state_dir / "key"

    @property
    def runtime_dir(self) -> Path:
        return self.base / "run"

    @property
    def workspace(self) -> Path:
        return self.base / "workspace"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "sprite.log"

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def write_config(self, tables: dict[str, dict[str, str]] | None = None, **extra: str) -> None:
        """The config file; ``extra`` are more ``sprite.*`` keys, ``tables`` other tables
        (``{"worker": {"idle-exit": "1s"}}``)."""
        lines = [
            "[sprite]",
            'address = "127.0.0.1"',
            f"port = {self.port}",
            f'service-user = "{self.service.name}"',
            f'agent-user = "{self.agent.name}"',
            f'group = "{self.service.name}"',
            f'workspace = "{self.workspace}"',
            f'state-dir = "{self.state_dir}"',
            f'runtime-dir = "{self.runtime_dir}"',
            f'install-dir = "{self.python.parent.parent}"',
        ]
        if self.tls:
            lines += [f'tls-cert = "{self.tls[0]}"', f'tls-key = "{self.tls[1]}"']
        lines += [f'{k} = "{v}"' for k, v in extra.items()]
        for table, keys in (tables or {}).items():
            lines += [f"[{table}]", *(f'{k} = "{v}"' for k, v in keys.items())]
        self.config.write_text("\n".join(lines) + "\n")
        os.chown(self.config, 0, self.service.gid)
        self.config.chmod(0o640)

    def argv(self) -> list[str]:
        return [
            str(self.python),
            "-c",
            "import sys; from zodex_gateway.cli import main; sys.argv[0] = 'zodex'; main()",
            "sprite",
            "serve",
            "--config",
            str(self.config),
        ]

    def start(self, wrapper: tuple[str, ...] = ()) -> None:
        """``wrapper``: a command line the service is started through (it ends with exec "$@")."""
        env = {"PATH": "/usr/bin:/bin", MARKER: MARKER_VALUE, "HOME": "/root"}
        self.process = subprocess.Popen(
            [*wrapper, *self.argv()],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd="/",
        )
        # Drained as it comes, as journald would: a full pipe would block the service's logging.
        self._output: list[str] = []
        self._drain = threading.Thread(target=self._read_output, args=(self.process,), daemon=True)
        self._drain.start()
        wait_until(self._healthy, timeout=30, what="the Sprite service to answer /health")

    def _read_output(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self._output.append(line)

    def output(self) -> str:
        """What the service wrote to its stdout and stderr so far."""
        return "".join(self._output)

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            self._drain.join(timeout=10)
            raise AssertionError(f"zodex sprite serve exited ({self.process.returncode}): {self.output()}")
        try:
            with self.client() as http:
                return http.get("/health").status_code == 200
        except httpx2.HTTPError:
            return False

    def client(self) -> httpx2.Client:
        return httpx2.Client(base_url=self.url, verify=False, timeout=scaled(10))

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=scaled(30))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._drain.join(timeout=10)
        self.extra["output"] = self.output()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    @contextlib.asynccontextmanager
    async def mcp(self, key: str | None = None) -> AsyncIterator[ClientSession]:
        url = f"{self.url}/mcp?key={key or self.key}"
        async with (
            httpx2.AsyncClient(verify=False, timeout=scaled(30)) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            self.extra["initialize"] = await session.initialize()
            yield session


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def sprite_setup(
    *, start: bool = True, tls: bool = False, tables: dict[str, dict[str, str]] | None = None
) -> Iterator[Sprite]:
    """Accounts, directories, config and key; the service started unless ``start=False``;
    ``tables`` are more config tables (Local's limit keys)."""
    with (
        runnable_install() as venv,
        throwaway_account("zs", shell="/usr/sbin/nologin") as service,
        throwaway_account("za") as agent,
    ):
        base = Path(tempfile.mkdtemp(prefix="zodex-sprite-", dir="/tmp"))
        base.chmod(0o755)
        sprite = Sprite(service, agent, base, venv / "bin" / "python3", new_key(), port=free_port())
        try:
            (base / "etc").mkdir(mode=0o755)
            sprite.state_dir.mkdir(mode=0o700)
            os.chown(sprite.state_dir, service.uid, service.gid)
            sprite.workspace.mkdir(mode=0o750)
            os.chown(sprite.workspace, agent.uid, agent.gid)
            write_key(sprite.key_file, sprite.key, service.uid, service.gid)
            if tls:
                cert, key = base / "etc" / "cert.pem", base / "etc" / "key.pem"
                subprocess.run(
                    ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                     "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                    check=True, capture_output=True,
                )  # fmt: skip
                key.chmod(0o600)  # root's alone: loaded before the service drops root
                sprite.tls = (cert, key)
            sprite.write_config(tables)
            if start:
                sprite.start()
            yield sprite
        finally:
            sprite.stop()
            import shutil

            shutil.rmtree(base, ignore_errors=True)


def tool_json(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


def agent_processes(sprite: Sprite) -> list[int]:
    return processes_of(sprite.agent.uid)


def agent_processes_but_the_template(sprite: Sprite) -> list[int]:
    """The agent's processes other than its worker template, which stays while the service
    runs (docs/sprite.md#worker-template)."""
    return [pid for pid in agent_processes(sprite) if not _is_template(pid)]


def _is_template(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[1:4] == [b"-I", b"-m", b"zodex_worker.template"]
