"""Every client-facing transport of one machine, opened with the MCP SDK's client at a given
revision mode: ``auto`` (2026-07-28) or ``legacy`` (the handshake, 2025-11-25). ``limits``
(fields of ``Limits``) are given to whatever serves the transport: a gateway's
``ZODEX_LIMITS``, Local's configuration keys (docs/config.md#keys)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.gateway import GATEWAY, Mcp, gateway_env, start_http_gateway
from tests.support.local import ZODEX, LocalEnv, local_env

Opener = Callable[..., AbstractAsyncContextManager[Mcp]]
# Local's configuration key for each limit a test gives, and its unit.
LOCAL_KEYS = {"progress_interval_ms": "session.progress-interval"}


@asynccontextmanager
async def http(url: str, token: str, mode: str) -> AsyncIterator[Mcp]:
    async with (
        create_mcp_http_client(headers={"X-Zodex-Local-Token": token}) as client,
        Client(streamable_http_client(url, http_client=client), read_timeout_seconds=60, mode=mode) as mcp,  # type: ignore[arg-type]
    ):
        yield Mcp(mcp)


@asynccontextmanager
async def stdio_gateway(workdir: Path, mode: str, **limits: int) -> AsyncIterator[Mcp]:
    with gateway_env(**limits) as env:
        params = StdioServerParameters(command=GATEWAY, args=["stdio"], env=env.env(), cwd=str(env.root))
        async with Client(params, read_timeout_seconds=60, mode=mode) as client:  # type: ignore[arg-type]
            yield Mcp(client)


@asynccontextmanager
async def http_gateway(workdir: Path, mode: str, **limits: int) -> AsyncIterator[Mcp]:
    with gateway_env(**limits) as env:
        gateway = start_http_gateway(env)
        try:
            async with http(gateway.url, gateway.token, mode) as mcp:
                yield mcp
        finally:
            await asyncio.to_thread(gateway.stop)


@asynccontextmanager
async def local_http(workdir: Path, mode: str, **limits: int) -> AsyncIterator[Mcp]:
    with local_env() as local:
        _configure(local, limits)
        local.run("local", "start", str(workdir))
        discovery = local.discovery()
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        async with http(discovery["mcp"]["url"], token, mode) as mcp:
            yield mcp


@asynccontextmanager
async def local_connect(workdir: Path, mode: str, **limits: int) -> AsyncIterator[Mcp]:
    with local_env() as local:
        _configure(local, limits)
        local.run("local", "start", str(workdir))
        params = StdioServerParameters(
            command=ZODEX, args=["local", "connect"], env=local.env(), cwd=str(local.root)
        )
        async with Client(params, read_timeout_seconds=60, mode=mode) as client:  # type: ignore[arg-type]
            yield Mcp(client)


def _configure(local: LocalEnv, limits: dict[str, int]) -> None:
    for field, value in limits.items():
        local.run("local", "config", "set", LOCAL_KEYS[field], f"{value}ms")


TRANSPORTS: dict[str, Opener] = {
    "zodex-gateway stdio": stdio_gateway,
    "zodex-gateway http": http_gateway,
    "Local HTTP": local_http,
    "zodex local connect": local_connect,
}
REVISIONS = {"auto": "2026-07-28", "legacy": "2025-11-25"}
