"""A CURVE peer that a host's ZAP refuses: one connection attempt, made once."""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message


async def refused_handshake(endpoint: str, server_public: bytes, public: bytes, secret: bytes) -> None:
    """Connect to ``endpoint`` as the CURVE key ``public`` without reconnecting, and return
    once the server has refused it (the handshake failed on authentication)."""
    context = zmq.asyncio.Context()
    peer = context.socket(zmq.DEALER)
    peer.linger = 0
    peer.setsockopt(zmq.RECONNECT_IVL, -1)
    peer.curve_secretkey, peer.curve_publickey, peer.curve_serverkey = secret, public, server_public
    monitor = peer.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    try:
        peer.connect(endpoint)
        event = parse_monitor_message(await asyncio.wait_for(monitor.recv_multipart(), 10))
        assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH, event
    finally:
        peer.disable_monitor()
        monitor.close()
        peer.close()
        context.term()
