"""Start real gateways and talk to them with the real MCP client (stdio or HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.slowdown import scaled

VENV_BIN = Path(sys.executable).parent
GATEWAY = str(VENV_BIN / "zodex-gateway")


@dataclass
class GatewayEnv:
    """Private XDG and runtime directories for one test (short paths: ipc sockets are
    limited to ~100 characters)."""

    root: Path
    limits: dict[str, int] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def state_home(self) -> Path:
        return self.root / "state"

    @property
    def runtime_home(self) -> Path:
        return self.root / "run"

    @property
    def spill_dir(self) -> Path:
        return self.state_home / "zodex" / "local" / "spill"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            XDG_STATE_HOME=str(self.state_home),
            XDG_RUNTIME_DIR=str(self.runtime_home),
            XDG_CONFIG_HOME=str(self.root / "config"),
            SHELL="/bin/bash",
        )
        if self.limits:
            env["ZODEX_LIMITS"] = json.dumps(self.limits)
        env.update(self.extra)
        return env

    def runtime_dirs(self) -> list[Path]:
        base = self.runtime_home / "zodex"
        return sorted(base.iterdir()) if base.exists() else []


@contextlib.contextmanager
def gateway_env(**limits: int) -> Any:
    root = Path(tempfile.mkdtemp(prefix="zx"))
    (root / "run").mkdir(mode=0o700)
    try:
        yield GatewayEnv(root, dict(limits))
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Mcp:
    """A connected MCP client plus small helpers that return structured results."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **args: Any) -> Any:
        return await self.client.call_tool(tool, args)

    async def exec(self, cmd: str, workdir: str, **args: Any) -> dict[str, Any]:
        result = await self.call("exec_command", cmd=cmd, workdir=workdir, **args)
        assert not result.is_error, result.content[0].text
        return dict(result.structured_content)

    async def write(self, handle: str, **args: Any) -> dict[str, Any]:
        result = await self.call("write_stdin", session_handle=handle, **args)
        assert not result.is_error, result.content[0].text
        return dict(result.structured_content)

    async def error(self, tool: str, **args: Any) -> str:
        result = await self.call(tool, **args)
        assert result.is_error, f"expected an error, got {result.structured_content!r}"
        assert len(result.content) == 1
        text: str = result.content[0].text
        return text

    async def output_until(self, handle: str, marker: str, first: str = "", timeout: float = 20.0) -> str:
        """Poll ``handle`` until its output (after ``first``, what the caller already has)
        contains ``marker``; all of it. Fails, showing the output, if it never does
        (``timeout`` is scaled by ``ZODEX_TEST_SLOWDOWN``)."""
        out = first
        try:
            async with asyncio.timeout(scaled(timeout)):
                while marker not in out:
                    out += (await self.write(handle, yield_time_ms=1000))["output"]
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {marker!r} from {handle}; output: {out!r}") from None
        return out

    async def drain(self, handle: str, *, limit_s: float = 30.0) -> tuple[str, dict[str, Any]]:
        """Poll until the session exits; return all output and the last result. Fails if
        it is still running after ``limit_s`` (scaled by ``ZODEX_TEST_SLOWDOWN``)."""
        out: list[str] = []
        try:
            async with asyncio.timeout(scaled(limit_s)):
                while True:
                    r = await self.write(handle, yield_time_ms=5000)
                    out.append(r["output"])
                    if r["status"] == "exited":
                        return "".join(out), r
        except TimeoutError:
            raise AssertionError(
                f"{handle} still running after {scaled(limit_s)}s; output: {''.join(out)!r}"
            ) from None


@contextlib.asynccontextmanager
async def stdio_gateway(env: GatewayEnv, *args: str) -> AsyncIterator[Mcp]:
    params = StdioServerParameters(command=GATEWAY, args=["stdio", *args], env=env.env(), cwd=str(env.root))
    async with Client(params, read_timeout_seconds=120) as client:
        yield Mcp(client)


@dataclass
class HttpGateway:
    process: subprocess.Popen[str]
    url: str
    token: str
    port: int

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(scaled(15))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_http_gateway(env: GatewayEnv, *args: str) -> HttpGateway:
    token_file = env.root / "token"
    process = subprocess.Popen(
        [GATEWAY, "http", "--port", "0", "--token-file", str(token_file), *args],
        env=env.env(),
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(env.root),
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line.startswith("listening on http://127.0.0.1:"), line
    url = line.removeprefix("listening on ")
    port = int(url.split(":")[2].split("/")[0])
    return HttpGateway(process, url, token_file.read_text().strip(), port)


@contextlib.asynccontextmanager
async def http_client(url: str, headers: dict[str, str]) -> AsyncIterator[Mcp]:
    http = create_mcp_http_client(headers=headers)
    async with (
        http,
        Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120) as client,
    ):
        yield Mcp(client)


@contextlib.asynccontextmanager
async def http_gateway(env: GatewayEnv, *args: str) -> AsyncIterator[Mcp]:
    gateway = start_http_gateway(env, *args)
    try:
        async with http_client(gateway.url, {"X-Zodex-Local-Token": gateway.token}) as mcp:
            yield mcp
    finally:
        await asyncio.to_thread(gateway.stop)


CONNECTORS: dict[str, Callable[..., Any]] = {"stdio": stdio_gateway, "http": http_gateway}


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Bounded wait on a condition that has no event to wait on (a process gone, a file);
    ``timeout`` is scaled by ``ZODEX_TEST_SLOWDOWN`` (tests/support/slowdown.py)."""
    deadline = time.monotonic() + scaled(timeout)
    delay = 0.005
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


def comm(pid: int) -> str:
    """The name a process runs under (``/proc/<pid>/comm``); empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
