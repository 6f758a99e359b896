"""Who owns a listening TCP socket, from the kernel's tables (``/proc/net/tcp``, ``tcp6``).

Each row names the socket's local address and port, its state (``0A``: listening) and the
uid of the account that made it. A client that is about to send a secret to a port on this
host can ask first whose listener it would reach.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

LISTEN: Final = "0A"
TABLES: Final = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def listener_uids(port: int, tables: tuple[Path, ...] = TABLES) -> set[int]:
    """The uids of every socket listening on ``port`` (any address, IPv4 or IPv6)."""
    owners: set[int] = set()
    for table in tables:
        try:
            rows = table.read_text().splitlines()[1:]
        except OSError:
            continue  # no IPv6 on this kernel, say
        for row in rows:
            fields = row.split()
            if len(fields) < 8 or fields[3] != LISTEN:
                continue
            _, _, local_port = fields[1].rpartition(":")
            if int(local_port, 16) == port:
                owners.add(int(fields[7]))
    return owners
