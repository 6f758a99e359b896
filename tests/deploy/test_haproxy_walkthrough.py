"""The operator walk-through of docs/deploy.md#walk-through-two-hosts-and-two-gateways-behind-haproxy,
run on loopback as root: two hosts as separate ``zodex host serve`` processes (each with
throwaway service and agent accounts, and exactly the capabilities the StatefulSet in
deploy/k8s/hosts.yaml grants), two ``zodex gateway serve``, and Debian's haproxy with
deploy/haproxy/haproxy.cfg in front (its ports moved to free ones). The real mcp SDK client
talks only to haproxy's address.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.deploy.manifests import HAPROXY_CFG, container, one
from tests.sprite.serve.sprite_support import free_port
from tests.support.accounts import Account, require_root, runnable_install, throwaway_account
from tests.support.waiting import wait_until
from zodex_gateway.fleet import keys

pytestmark = pytest.mark.timeout(180)

HAPROXY = "/usr/sbin/haproxy"


def zodex(python: Path, *args: str) -> list[str]:
    return [
        str(python),
        "-c",
        "import sys; from zodex_gateway.cli import main; sys.argv[0] = 'zodex'; main()",
        *args,
    ]


def host_capabilities() -> list[str]:
    """setpriv's arguments for the host container's securityContext: as root, what an execve
    leaves in the permitted set is the bounding set."""
    spec = one("StatefulSet", "zodex-host")["spec"]["template"]["spec"]
    security = container(spec, "host")["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["allowPrivilegeEscalation"] is False
    bounding = ",".join(["-all"] + [f"+{c.lower()}" for c in security["capabilities"]["add"]])
    return ["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all", "--no-new-privs"]


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def exited(process: subprocess.Popen[bytes], what: str) -> None:
    if process.poll() is not None:
        err = process.stderr.read().decode(errors="replace") if process.stderr else ""
        raise AssertionError(f"{what} exited with {process.returncode}: {err}")


@dataclass
class WalkHost:
    name: str
    port: int
    service: Account
    agent: Account
    base: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def workspace(self) -> Path:
        return self.base / "workspace"

    @property
    def log_file(self) -> Path:
        return self.base / "state" / "logs" / "host.log"


@dataclass
class Walk:
    keys: Path
    hosts: dict[str, WalkHost]
    gateways: dict[str, subprocess.Popen[bytes]]
    front: int
    seen: list[tuple[str, str]] = field(default_factory=list)  # (JSON-RPC method, gateway)


@contextlib.contextmanager
def walk_host(name: str, port: int, python: Path, key_dir: Path) -> Iterator[WalkHost]:
    """Steps 1–3: accounts, directories, keys and host-<name>.toml, then zodex host serve."""
    with (
        throwaway_account("zs", shell="/usr/sbin/nologin") as service,
        throwaway_account("za") as agent,
    ):
        base = Path(tempfile.mkdtemp(prefix=f"zodex-walk-{name}-", dir="/tmp"))
        base.chmod(0o755)
        host = WalkHost(name, port, service, agent, base)
        try:
            (base / "state").mkdir(mode=0o700)
            os.chown(base / "state", service.uid, service.gid)
            host.workspace.mkdir(mode=0o750)
            os.chown(host.workspace, agent.uid, agent.gid)
            gateways = base / "gateways"
            gateways.mkdir(mode=0o700)
            shutil.copy(key_dir / "gateway.pub", gateways / "gateway.pub")
            (gateways / "gateway.pub").chmod(0o400)
            config = base / f"host-{name}.toml"
            config.write_text(
                "\n".join([
                    "[host]",
                    f'name = "{name}"',
                    f'endpoint = "tcp://127.0.0.1:{port}"',
                    f'secret-key = "{key_dir / f"{name}.key"}"',
                    f'signing-key = "{key_dir / f"{name}.signing"}"',
                    f'gateway-keys = "{gateways}"',
                    "",
                    "[sprite]",
                    f'service-user = "{service.name}"',
                    f'agent-user = "{agent.name}"',
                    f'group = "{service.name}"',
                    f'workspace = "{host.workspace}"',
                    f'state-dir = "{base / "state"}"',
                    f'runtime-dir = "{base / "run"}"',
                    f'install-dir = "{python.parent.parent}"',
                ])
                + "\n"
            )  # fmt: skip
            host.process = subprocess.Popen(
                [*host_capabilities(), *zodex(python, "host", "serve", "--config", str(config))],
                env={"PATH": "/usr/bin:/bin", "HOME": "/root"},
                cwd="/",
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )

            def serving() -> bool:
                assert host.process is not None
                exited(host.process, f"zodex host serve ({name})")
                return host.log_file.exists() and " serving on " in host.log_file.read_text(errors="replace")

            wait_until(serving, timeout=30, what=f"host {name} to serve")
            yield host
        finally:
            stop(host.process)
            if host.process is not None and host.process.stderr is not None:
                host.process.stderr.close()
            shutil.rmtree(base, ignore_errors=True)


def gateway_config(path: Path, port: int, key_dir: Path, hosts: list[WalkHost]) -> None:
    """Step 4: the same config for both gateways but for the port."""
    lines = [
        "[gateway]",
        'address = "127.0.0.1"',
        f"port = {port}",
        f'secret-key = "{key_dir / "gateway.key"}"',
    ]
    for host in hosts:
        lines += [
            "",
            "[[hosts]]",
            f'name = "{host.name}"',
            f'endpoint = "tcp://127.0.0.1:{host.port}"',
            f'public-key = "{key_dir / f"{host.name}.pub"}"',
            f'signing-key = "{key_dir / f"{host.name}.signing"}"',
            f'mcp-key = "{key_dir / f"{host.name}.mcp"}"',
            f'workspace = "{host.workspace}"',
        ]
    path.write_text("\n".join(lines) + "\n")


def haproxy_config(path: Path, front: int, gateway_ports: dict[str, int]) -> None:
    """Step 5: deploy/haproxy/haproxy.cfg as shipped, its three ports moved to free ones."""
    text = HAPROXY_CFG.read_text()
    moves = {"bind 127.0.0.1:8000": f"bind 127.0.0.1:{front}"}
    moves |= {
        f"{name} 127.0.0.1:{8080 + i}": f"{name} 127.0.0.1:{port}"
        for i, (name, port) in enumerate(gateway_ports.items(), 1)
    }
    for old, new in moves.items():
        assert text.count(old) == 1, f"deploy/haproxy/haproxy.cfg no longer has {old}"
        text = text.replace(old, new)
    path.write_text(text)


def healthy(url: str) -> bool:
    try:
        return httpx2.get(url, timeout=2).status_code == 200
    except httpx2.HTTPError:
        return False


@pytest.fixture(scope="module")
def walk() -> Iterator[Walk]:
    require_root()
    if not os.access(HAPROXY, os.X_OK):
        pytest.skip(f"{HAPROXY} is missing: scripts/setup.sh --test installs Debian's haproxy")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) runs each host with the StatefulSet's capabilities")
    key_dir = Path(tempfile.mkdtemp(prefix="zodex-walk-keys-", dir="/tmp"))
    gateways: dict[str, subprocess.Popen[bytes]] = {}
    front_process: subprocess.Popen[bytes] | None = None
    try:
        keys.keygen(key_dir, "gateway")
        for name in ("a", "b"):
            keys.keygen(key_dir, name)
            keys.keygen(key_dir, name, "signing")
            keys.keygen(key_dir, name, "mcp")
        with (
            runnable_install() as venv,
            walk_host("a", free_port(), venv / "bin" / "python3", key_dir) as a,
            walk_host("b", free_port(), venv / "bin" / "python3", key_dir) as b,
        ):
            ports = {"gateway-1": free_port(), "gateway-2": free_port()}
            for name, port in ports.items():
                config = key_dir / f"{name}.toml"
                gateway_config(config, port, key_dir, [a, b])
                gateways[name] = subprocess.Popen(
                    zodex(venv / "bin" / "python3", "gateway", "serve", "--config", str(config)),
                    env={"PATH": "/usr/bin:/bin", "HOME": "/root"},
                    cwd="/",
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            for name, port in ports.items():

                def up(name: str = name, port: int = port) -> bool:
                    exited(gateways[name], f"zodex gateway serve ({name})")
                    return healthy(f"http://127.0.0.1:{port}/health")

                wait_until(up, timeout=30, what=f"{name} to answer /health")
            front = free_port()
            haproxy_config(key_dir / "haproxy.cfg", front, ports)
            check = subprocess.run(
                [HAPROXY, "-c", "-f", str(key_dir / "haproxy.cfg")], capture_output=True, text=True
            )
            assert check.returncode == 0, check.stderr
            front_process = subprocess.Popen(
                [HAPROXY, "-db", "-f", str(key_dir / "haproxy.cfg")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            answered: set[str] = set()

            def both_behind_the_front() -> bool:
                assert front_process is not None
                exited(front_process, "haproxy")
                with contextlib.suppress(httpx2.HTTPError):
                    reply = httpx2.get(f"http://127.0.0.1:{front}/health", timeout=2)
                    if reply.status_code == 200:
                        answered.add(reply.headers["x-zodex-gateway"])
                return answered == set(ports)

            wait_until(both_behind_the_front, timeout=30, what="haproxy to reach both gateways")
            yield Walk(key_dir, {"a": a, "b": b}, gateways, front)
    finally:
        stop(front_process)
        for process in gateways.values():
            stop(process)
            if process.stderr is not None:
                process.stderr.close()
        shutil.rmtree(key_dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def through_front(walk: Walk, host: str) -> AsyncIterator[ClientSession]:
    """Step 6: an MCP client of haproxy's address only; each tools/call's gateway is kept."""
    key = (walk.keys / f"{host}.mcp").read_text().strip()

    async def note(response: httpx2.Response) -> None:
        request = response.request
        if request.method == "POST" and request.content:
            method = json.loads(request.content).get("method", "")
            walk.seen.append((method, response.headers.get("x-zodex-gateway", "?")))

    async with (
        httpx2.AsyncClient(timeout=90, event_hooks={"response": [note]}) as http,
        streamable_http_client(f"http://127.0.0.1:{walk.front}/h/{host}/mcp?key={key}", http_client=http) as (
            read,
            write,
        ),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def result_json(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


def last_call_gateway(walk: Walk) -> str:
    calls = [gateway for method, gateway in walk.seen if method == "tools/call"]
    assert calls and calls[-1] in walk.gateways, walk.seen
    return calls[-1]


async def test_a_command_started_through_one_gateway_is_polled_and_typed_into_through_the_other(
    walk: Walk,
) -> None:
    a = walk.hosts["a"]
    async with through_front(walk, "a") as session:
        started = result_json(
            await session.call_tool(
                "exec_command",
                {
                    "cmd": 'echo ready; read line; echo "got:$line as $(id -un) in $PWD"',
                    "workdir": str(a.workspace),
                    "yield_time_ms": 1000,
                },
            )
        )
        assert started["status"] == "running", started
        handle = started["session_handle"]
        exec_gateway = last_call_gateway(walk)
        # Round-robin: within a few polls one lands on the other gateway, which has never
        # seen this session and finds it from the handle alone.
        for _ in range(4):
            polled = result_json(
                await session.call_tool(
                    "write_stdin", {"session_handle": handle, "chars": "", "yield_time_ms": 50}
                )
            )
            assert polled["status"] == "running", polled
            if last_call_gateway(walk) != exec_gateway:
                break
        else:
            raise AssertionError(f"every poll went to {exec_gateway}: {walk.seen}")
        done = result_json(
            await session.call_tool(
                "write_stdin", {"session_handle": handle, "chars": "hello\n", "yield_time_ms": 5000}
            )
        )
    assert done["exit_code"] == 0, done
    assert f"got:hello as {a.agent.name} in {a.workspace}" in done["output"], done


async def test_each_host_behind_the_one_address_runs_its_own_commands(walk: Walk) -> None:
    for name, host in walk.hosts.items():
        async with through_front(walk, name) as session:
            ran = result_json(
                await session.call_tool(
                    "exec_command", {"cmd": "id -un; pwd", "workdir": str(host.workspace)}
                )
            )
        assert ran["exit_code"] == 0, ran
        assert ran["output"].split() == [host.agent.name, str(host.workspace)], ran


async def test_a_stopped_gateway_leaves_the_address_serving(walk: Walk) -> None:
    """haproxy retries a request whose connection failed on the other gateway (retry-on
    conn-failure): no call fails, even before its health check marks the gateway down."""
    a = walk.hosts["a"]
    stop(walk.gateways["gateway-1"])
    async with through_front(walk, "a") as session:
        for _ in range(3):
            ran = result_json(
                await session.call_tool(
                    "exec_command", {"cmd": "echo still here", "workdir": str(a.workspace)}
                )
            )
            assert ran["exit_code"] == 0 and "still here" in ran["output"], ran
            assert last_call_gateway(walk) == "gateway-2"
