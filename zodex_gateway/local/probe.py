"""Asking a running runtime's workers how many sessions they run (for ``zodex local status``)."""

from __future__ import annotations

import zmq

from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec, read_key_file
from zodex_protocol.errors import ProtocolError
from zodex_protocol.layout import RuntimeLayout, WorkerRecord
from zodex_protocol.replies import Pong

PING_TIMEOUT_MS = 2000


def count_running_sessions(layout: RuntimeLayout) -> int:
    if not layout.key_file.exists():
        return 0
    codec = WireCodec(read_key_file(layout.key_file))
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    total = 0
    try:
        for record_file in sorted(layout.workers_dir.glob("*.json")):
            record = WorkerRecord.read(record_file)
            if record is not None:
                total += _ping(context, codec, record)
    finally:
        context.destroy(linger=0)
    return total


def _ping(context: zmq.Context[zmq.Socket[bytes]], codec: WireCodec, record: WorkerRecord) -> int:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(record.request_endpoint)
    try:
        request = Envelope(type=messages.PING, body={})
        socket.send_multipart(codec.serialize(request))
        if not socket.poll(PING_TIMEOUT_MS):
            return 0  # a dead or hung worker runs nothing we can vouch for
        reply = codec.deserialize(socket.recv_multipart())
        if reply.type != messages.PONG or reply.reply_to != request.id:
            return 0
        return Pong.from_body(reply.body).live_sessions
    except (ProtocolError, zmq.ZMQError, ValueError, AttributeError):
        return 0
    finally:
        socket.close(linger=0)
