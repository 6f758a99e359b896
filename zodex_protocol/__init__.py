"""The wire contract between the Zodex gateway and its workers: no sockets, no processes."""

from zodex_protocol.envelope import Envelope, ReplayGuard, WireCodec, new_key, read_key_file
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import SessionHandle, worker_id_for
from zodex_protocol.limits import Limits
from zodex_protocol.version import PROTOCOL_VERSION

__all__ = [
    "PROTOCOL_VERSION",
    "Envelope",
    "ErrorCode",
    "Limits",
    "ProtocolError",
    "ReplayGuard",
    "SessionHandle",
    "WireCodec",
    "new_key",
    "read_key_file",
    "worker_id_for",
]
