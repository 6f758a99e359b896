"""HTTP servers get sockets that asyncio sets TCP_NODELAY on: without it a response's
headers and body wait on Nagle and the client's delayed ACK, ~40 ms per request."""

from __future__ import annotations

import asyncio
import socket

from zodex_gateway.web.server import listen


async def test_accepted_connections_have_nodelay() -> None:
    sock = listen("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            peer = transport.get_extra_info("socket")
            accepted.set_result(peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
    try:
        _reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(accepted, 5) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
