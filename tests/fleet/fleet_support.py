"""Fleet hosts as separate machines for tests (root only): the harness of
``scripts/fleet_harness.py`` (each host in its own network namespace joined by a veth pair
with link-local ``169.254.x.y/30`` addresses, real ``zodex host serve`` as throwaway
accounts, real ``zodex gateway serve`` on loopback), plus the MCP client helpers the tests
use. Namespaces, links, accounts, directories and processes are removed whatever happens."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from scripts.fleet_harness import (
    HOST_PORT,
    Gateway,
    Host,
    Namespace,
    fleet_host,
    mcp_key,
    namespace,
    netns_unavailable,
    write_gateway_config,
)
from tests.support.slowdown import scaled
from zodex_gateway.fleet import keys

__all__ = [
    "HOST_PORT",
    "Gateway",
    "Host",
    "Namespace",
    "Stopwatch",
    "error_text",
    "fleet_host",
    "mcp",
    "mcp_key",
    "namespace",
    "require_netns",
    "result_json",
    "write_gateway_config",
]


def require_netns() -> None:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)


@contextlib.asynccontextmanager
async def mcp(gateway: Gateway, host: Host, key: str | None = None) -> AsyncIterator[ClientSession]:
    url = f"{gateway.url}/h/{host.name}/mcp?key={key or mcp_key(host)}"
    async with (
        httpx2.AsyncClient(timeout=scaled(90)) as http,
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


def one_gateway_key(tmp_path: Path) -> Path:
    """``tmp_path`` opened to every account, with a directory holding one gateway's key pair
    (``gw.key``, ``gw.pub``), which it returns: a host reads only the public one."""
    tmp_path.chmod(0o755)
    gateway_keys = tmp_path / "gateways"
    gateway_keys.mkdir()
    gateway_keys.chmod(0o755)
    keys.keygen(gateway_keys, "gw")
    return gateway_keys


async def exec_through_a_gateway(host: Host, gateway_keys: Path, tmp_path: Path, cmd: str) -> dict[str, Any]:
    """``cmd`` run in ``host``'s workspace through a gateway of its own (key ``gw`` of
    ``gateway_keys``), started and stopped around the call; the call's result."""
    gateway = Gateway(tmp_path / "gw.toml", host.python)
    write_gateway_config(gateway.config, gateway_keys / "gw.key", [host], gateway.port)
    gateway.start()
    try:
        async with mcp(gateway, host) as session:
            return result_json(
                await session.call_tool("exec_command", {"cmd": cmd, "workdir": str(host.workspace)})
            )
    finally:
        gateway.stop()
