"""Which local account opened a loopback TCP connection: read from the kernel's socket table.

The capability URL lets in whoever knows it; typing into a session asks for more: the
connection must come from this account. On Linux, ``/proc/net/tcp`` lists every socket of
the network namespace with its owner's uid, so the browser's end of a connection to the
watch host is found by its address and port. Anything not found counts as a stranger.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Final

TCP_TABLE: Final = Path("/proc/net/tcp")
ESTABLISHED: Final = "01"


def _hex_address(host: str, port: int) -> str:
    # The kernel prints the address as one native-endian 32-bit word, then the port.
    (word,) = struct.unpack("=I", socket.inet_aton(host))
    return f"{word:08X}:{port:04X}"


def peer_uid(client: tuple[str, int], server: tuple[str, int], table: Path = TCP_TABLE) -> int | None:
    """The uid owning the socket at ``client`` connected to ``server`` (IPv4), or None."""
    try:
        local, remote = _hex_address(*client), _hex_address(*server)
        lines = table.read_text().splitlines()[1:]
    except (OSError, ValueError):
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 7 and fields[1] == local and fields[2] == remote and fields[3] == ESTABLISHED:
            return int(fields[7])
    return None
