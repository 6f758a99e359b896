"""``zodex gateway serve``: a fleet gateway in the foreground (docs/fleet.md#gateways).

It holds no state: every tool call goes to the host its address names, and every replica
with the same config serves the same hosts the same way. It needs no privilege.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import signal
import socket
import sys
from dataclasses import dataclass

import zmq.asyncio

from zodex_gateway.agents.session_ids import SessionIds
from zodex_gateway.config.package_version import zodex_version
from zodex_gateway.config.units import ConfigError
from zodex_gateway.fleet import keys
from zodex_gateway.fleet.front import FleetFront, McpKeySource, read_mcp_key
from zodex_gateway.fleet.remote import RemoteDispatcher
from zodex_gateway.fleet.settings import GatewaySettings, HostEntry
from zodex_gateway.mcp.mode import Mode
from zodex_gateway.sprite.auth import SpriteFront
from zodex_gateway.sprite.service import keyed_mcp
from zodex_gateway.web.server import Listeners, listen
from zodex_system import log_lines

log = logging.getLogger("zodex.gateway")

SESSION_ID_LABEL = b"zodex gateway: Mcp-Session-Id key"


@dataclass(frozen=True)
class HostKeys:
    entry: HostEntry
    public_key: bytes
    signing_key: bytes
    mcp_key: str


def main(settings: GatewaySettings) -> int:
    try:
        secret = keys.read_z85_secret(settings.secret_key)
        hosts = [
            HostKeys(
                entry,
                keys.read_public_key(entry.public_key),
                keys.signing_key(keys.read_z85_secret(entry.signing_key)),
                read_mcp_key(entry.mcp_key),
            )
            for entry in settings.hosts
        ]
        sock = listen(settings.address, settings.port)
    except ConfigError as exc:
        print(f"zodex gateway serve: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"zodex gateway serve: cannot listen on {settings.address}:{settings.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return 1
    log_lines.log_to_stderr("%(asctime)s %(name)s %(levelname)s %(message)s", logging.INFO)
    logging.getLogger("mcp").setLevel(logging.WARNING)
    asyncio.run(_serve(settings, secret, hosts, sock))
    return 0


async def _serve(
    settings: GatewaySettings, secret: bytes, hosts: list[HostKeys], sock: socket.socket
) -> None:
    context = zmq.asyncio.Context()
    dispatchers = []
    fronts: dict[str, SpriteFront] = {}
    limits = settings.listener_limits()
    # Mcp-Session-Id values are signed under a key every replica derives from the pair they
    # share, so a session initialized through one gateway is served by any other.
    session_ids = SessionIds(hmac.new(secret, SESSION_ID_LABEL, hashlib.sha256).digest())
    for host in hosts:
        dispatcher = RemoteDispatcher(
            host.entry.name,
            host.entry.endpoint,
            context=context,
            secret_key=secret,
            host_public_key=host.public_key,
            signing_key=host.signing_key,
        )
        dispatchers.append(dispatcher)
        fronts[host.entry.name] = keyed_mcp(
            dispatcher,
            Mode.FLEET,
            McpKeySource(host.entry.mcp_key, host.mcp_key),
            allowed_hosts=(),
            workspace=host.entry.workspace,
            max_body=limits.max_body,
            session_ids=session_ids,
        )
    listeners = Listeners(limits, lifespan="on", graceful_s=2)
    listeners.add(FleetFront(fronts, version=zodex_version()), sock)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, listeners.stop)
    address, port = sock.getsockname()[:2]
    log.info("serving %d hosts on http://%s:%d/h/<host>/mcp", len(hosts), address, port)
    try:
        await listeners.serve()
    finally:
        for dispatcher in dispatchers:
            await dispatcher.close()
        context.term()
    log.info("stopped")
