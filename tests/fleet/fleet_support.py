"""Fleet hosts as separate machines for tests (root only): each host in its own network
namespace, joined to the root namespace by a veth pair with link-local ``169.254.x.y/30``
addresses, running a real ``zodex host serve`` as throwaway service and agent accounts;
gateways are real ``zodex gateway serve`` processes in the root namespace, on loopback.
Namespaces, links, accounts, directories and processes are removed whatever happens."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.sprite.serve.sprite_support import free_port
from tests.support.accounts import Account, require_root, throwaway_account
from tests.support.waiting import wait_until
from zodex_gateway.hosts import keys

HOST_PORT = 7700


def require_netns() -> None:
    require_root()
    if shutil.which("ip") is None:
        pytest.skip("fleet tests put each host in a network namespace: needs iproute2's ip")
    probe = f"zxp{secrets.token_hex(3)}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"network namespaces are unavailable here: {done.stderr.strip()}")


def _ip(*args: str, netns: str | None = None) -> None:
    argv = ["ip", "netns", "exec", netns, "ip", *args] if netns else ["ip", *args]
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _used_addresses() -> str:
    return subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True, check=True).stdout


@dataclass
class Namespace:
    name: str
    root_link: str
    root_address: str
    host_address: str


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    """A network namespace with a veth pair to the root namespace: ``169.254.x.(y+1)`` on
    the root side, ``169.254.x.(y+2)`` inside, a ``/30`` nobody else on this machine uses."""
    used = _used_addresses()
    while True:
        x, y = secrets.randbelow(253) + 1, secrets.randbelow(64) * 4
        if f"169.254.{x}." not in used:
            break
    tag = secrets.token_hex(3)
    ns = Namespace(f"zx{tag}", f"zxr{tag}", f"169.254.{x}.{y + 1}", f"169.254.{x}.{y + 2}")
    try:
        _ip("netns", "add", ns.name)
        _ip("link", "add", ns.root_link, "type", "veth", "peer", "name", f"zxh{tag}")
        _ip("link", "set", f"zxh{tag}", "netns", ns.name)
        _ip("addr", "add", f"{ns.root_address}/30", "dev", ns.root_link)
        _ip("link", "set", ns.root_link, "up")
        _ip("addr", "add", f"{ns.host_address}/30", "dev", f"zxh{tag}", netns=ns.name)
        _ip("link", "set", f"zxh{tag}", "up", netns=ns.name)
        _ip("link", "set", "lo", "up", netns=ns.name)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns.name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", ns.root_link], capture_output=True, check=False)


def _zodex(python: Path, *args: str) -> list[str]:
    return [
        str(python),
        "-c",
        "import sys; from zodex_gateway.cli import main; sys.argv[0] = 'zodex'; main()",
        *args,
    ]


def _stop(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGCONT)
        process.send_signal(sig)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Host:
    name: str
    ns: Namespace
    service: Account
    agent: Account
    base: Path
    python: Path
    gateway_keys: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.ns.host_address}:{HOST_PORT}"

    @property
    def state_dir(self) -> Path:
        return self.base / "state"

    @property
    def workspace(self) -> Path:
        return self.base / "workspace"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "host.log"

    @property
    def keys_dir(self) -> Path:
        return self.base / "keys"

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def write_config(self) -> Path:
        config = self.base / "host.toml"
        config.write_text(
            "\n".join([
                "[host]",
                f'name = "{self.name}"',
                f'endpoint = "{self.endpoint}"',
                f'secret-key = "{self.keys_dir / "host.key"}"',
                f'signing-key = "{self.keys_dir / "host.signing"}"',
                f'gateway-keys = "{self.gateway_keys}"',
                "[sprite]",
                f'service-user = "{self.service.name}"',
                f'agent-user = "{self.agent.name}"',
                f'group = "{self.service.name}"',
                f'workspace = "{self.workspace}"',
                f'state-dir = "{self.state_dir}"',
                f'runtime-dir = "{self.base / "run"}"',
                f'install-dir = "{self.python.parent.parent}"',
            ])
            + "\n"
        )  # fmt: skip
        return config

    def start(self) -> None:
        starts = self.log().count(" serving on ")
        argv = [
            "ip",
            "netns",
            "exec",
            self.ns.name,
            *_zodex(self.python, "host", "serve", "--config", str(self.base / "host.toml")),
        ]
        self.process = subprocess.Popen(
            argv,
            env={"PATH": "/usr/bin:/bin", "HOME": "/root"},
            cwd="/",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

        def serving() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"zodex host serve exited: {self.process.stderr.read().decode() if self.process.stderr else ''}"
                )
            return self.log().count(" serving on ") > starts

        wait_until(serving, timeout=30, what=f"host {self.name} to serve")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        _stop(self.process, sig)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()


@contextlib.contextmanager
def fleet_host(name: str, python: Path, gateway_keys: Path) -> Iterator[Host]:
    with (
        namespace() as ns,
        throwaway_account("zs", shell="/usr/sbin/nologin") as service,
        throwaway_account("za") as agent,
    ):
        base = Path(tempfile.mkdtemp(prefix=f"zodex-host-{name}-", dir="/tmp"))
        base.chmod(0o755)
        host = Host(name, ns, service, agent, base, python, gateway_keys)
        try:
            host.state_dir.mkdir(mode=0o700)
            os.chown(host.state_dir, service.uid, service.gid)
            host.workspace.mkdir(mode=0o750)
            os.chown(host.workspace, agent.uid, agent.gid)
            host.keys_dir.mkdir(mode=0o700)
            keys.keygen(host.keys_dir, "host")
            keys.keygen(host.keys_dir, "host", "signing")
            keys.keygen(host.keys_dir, "host", "mcp")
            host.write_config()
            host.start()
            yield host
        finally:
            host.stop()
            shutil.rmtree(base, ignore_errors=True)


@dataclass
class Gateway:
    config: Path
    python: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = _zodex(self.python, "gateway", "serve", "--config", str(self.config))
        env = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
        self.process = subprocess.Popen(
            argv, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"zodex gateway serve exited: {self.process.stderr.read().decode() if self.process.stderr else ''}"
                )
            try:
                return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout=30, what="the gateway to answer /health")

    def stop(self) -> None:
        _stop(self.process)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()

    def restart(self) -> None:
        self.stop()
        self.start()


def write_gateway_config(path: Path, secret: Path, hosts: list[Host], port: int) -> None:
    lines = ["[gateway]", 'address = "127.0.0.1"', f"port = {port}", f'secret-key = "{secret}"']
    for host in hosts:
        lines += [
            "[[hosts]]",
            f'name = "{host.name}"',
            f'endpoint = "{host.endpoint}"',
            f'public-key = "{host.keys_dir / "host.pub"}"',
            f'signing-key = "{host.keys_dir / "host.signing"}"',
            f'mcp-key = "{host.keys_dir / "host.mcp"}"',
            f'workspace = "{host.workspace}"',
        ]
    path.write_text("\n".join(lines) + "\n")


def mcp_key(host: Host) -> str:
    return (host.keys_dir / "host.mcp").read_text().strip()


@contextlib.asynccontextmanager
async def mcp(gateway: Gateway, host: Host, key: str | None = None) -> AsyncIterator[ClientSession]:
    url = f"{gateway.url}/h/{host.name}/mcp?key={key or mcp_key(host)}"
    async with (
        httpx.AsyncClient(timeout=90) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def result_json(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


def error_text(result: Any) -> str:
    assert result.is_error, result.content[0].text
    text: str = result.content[0].text
    return text


class Stopwatch:
    def __enter__(self) -> Stopwatch:
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.start
