"""A host's cap on connections that have not authenticated (docs/fleet.md#the-wire): a flood
of keyless peers is cut to ``host.max-pending-connections``, the oldest dropped first, and
a gateway with an allowed key is still served through it. No root needed."""

from __future__ import annotations

import asyncio
import socket

import pytest
import zmq
import zmq.asyncio

from tests.gateway.fleet.test_wire import RESULT, Recorder
from tests.support.waiting import wait_until
from zodex_gateway.fleet import host_server
from zodex_gateway.fleet.host_server import HostServer, IncarnationCheck
from zodex_gateway.fleet.remote import RemoteDispatcher
from zodex_protocol.envelope import new_key
from zodex_protocol.limits import Limits

pytestmark = pytest.mark.timeout(60)

CAP = 8
FLOOD = 60
# A ZMTP 3 greeting of a CURVE client: the peer then stalls, as a flood's peers do.
GREETING = (
    b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
)


def closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


async def test_a_keyless_flood_is_cut_to_the_cap_oldest_first_and_gateways_still_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The handshake's own 5 s bound would drop the stalled peers too; here only the cap may.
    monkeypatch.setattr(host_server, "HANDSHAKE_IVL_MS", 120_000)
    host_public, host_secret = zmq.curve_keypair()
    gw_public, gw_secret = zmq.curve_keypair()
    signing = new_key()
    server = HostServer(
        IncarnationCheck(Recorder(), "alpha", "cur000", set(), Limits()),
        endpoint="tcp://127.0.0.1:*",
        secret_key=host_secret,
        signing_key=signing,
        gateway_keys={gw_public},
        max_pending=CAP,
    )
    serving = asyncio.create_task(server.serve())
    port = int(server.bound.rsplit(":", 1)[1])
    flood: list[socket.socket] = []
    context = zmq.asyncio.Context()
    gateway = RemoteDispatcher(
        "alpha", server.bound, context=context, secret_key=gw_secret, host_public_key=host_public,
        signing_key=signing,
    )  # fmt: skip
    try:
        assert await gateway.exec_command({"cmd": "true", "workdir": "/w"}) == RESULT
        for _ in range(FLOOD):
            peer = socket.create_connection(("127.0.0.1", port))
            peer.sendall(GREETING)
            flood.append(peer)
            await asyncio.sleep(0)  # the host's loop reads its monitor between connections

        def cut_to_the_cap() -> bool:
            return sum(closed_by_peer(p) for p in flood) >= FLOOD - CAP

        await asyncio.to_thread(wait_until, cut_to_the_cap, 20, "the host to drop the flood beyond its cap")
        dropped = [closed_by_peer(p) for p in flood]
        assert sum(dropped) == FLOOD - CAP
        assert all(dropped[: FLOOD - CAP]) and not any(dropped[FLOOD - CAP :]), "the oldest first"
        assert server._pending.pending <= CAP
        # The gateway's own connection, authenticated, was never counted or dropped.
        assert await gateway.exec_command({"cmd": "true", "workdir": "/w"}) == RESULT
    finally:
        for peer in flood:
            peer.close()
        await gateway.close()
        server.stop()
        await serving
        context.term()
