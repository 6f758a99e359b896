"""The agent's end of the publisher's socket (docs/github.md#the-socket). The socket's path
is ``zodex.socket`` in the agent's git config (``zodex sprite github setup`` writes it),
else the default."""

from __future__ import annotations

import socket
import subprocess
from typing import Any, Final

from .wire import WireError, read_line, send_line

__all__ = ["DEFAULT_SOCKET", "PublisherUnavailable", "connect", "request", "socket_path"]

DEFAULT_SOCKET: Final = "/run/zodex-publisher/socket"


class PublisherUnavailable(Exception):
    pass


def socket_path() -> str:
    done = subprocess.run(
        ["git", "config", "--get", "zodex.socket"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or DEFAULT_SOCKET


def connect() -> socket.socket:
    path = socket_path()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise PublisherUnavailable(
            f"the Zodex GitHub publisher is not reachable at {path} ({exc.strerror}); ask the operator to run "
            "`zodex sprite github status`"
        ) from None
    return sock


def exchange(sock: socket.socket, message: dict[str, Any]) -> dict[str, Any]:
    try:
        send_line(sock, message)
        answer = read_line(sock)
    except (OSError, WireError) as exc:
        raise PublisherUnavailable(f"the Zodex GitHub publisher did not answer: {exc}") from None
    if answer.get("ok") is not True:
        raise PublisherUnavailable(str(answer.get("error", "the publisher refused the request")))
    return answer


def request(message: dict[str, Any]) -> dict[str, Any]:
    with connect() as sock:
        return exchange(sock, message)
