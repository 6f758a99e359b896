"""The publisher's socket protocol (docs/github.md#the-socket): a request is one JSON
object on one line (at most 64 KiB); the answer is one JSON object on one line,
``{"ok": true, …}`` or ``{"ok": false, "error": "<one line>"}``. After an ``ok`` answer to
an ``op: "git"`` request the connection carries git's own pack protocol."""

from __future__ import annotations

import json
import socket
from typing import Any, Final

__all__ = ["MAX_LINE", "WireError", "read_line", "send_line"]

MAX_LINE: Final = 64 * 1024


class WireError(Exception):
    pass


def read_line(sock: socket.socket) -> dict[str, Any]:
    """One line, read without consuming a byte past it (git's stream may follow)."""
    seen = b""
    while True:
        peeked = sock.recv(MAX_LINE + 1 - len(seen), socket.MSG_PEEK)
        if not peeked:
            raise WireError("connection closed before a full line")
        end = peeked.find(b"\n")
        if end >= 0:
            seen += sock.recv(end + 1)
            break
        seen += sock.recv(len(peeked))
        if len(seen) > MAX_LINE:
            raise WireError(f"line longer than {MAX_LINE} bytes")
    try:
        found = json.loads(seen)
    except ValueError:
        raise WireError("line is not JSON") from None
    if not isinstance(found, dict):
        raise WireError("line is not a JSON object")
    return found


def send_line(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
