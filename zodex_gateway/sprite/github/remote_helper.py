"""``git-remote-zodex``: the git remote helper through which the agent's git reaches GitHub
(docs/github.md#the-agents-git). The agent's git config rewrites ``https://github.com/``
(and the ssh forms) to ``zodex::https://github.com/``; git then runs this helper, which
offers only ``connect``: git's own pack protocol, relayed byte for byte to the publisher,
which runs ``git upload-pack`` or ``git receive-pack`` on its mirror. No credential ever
passes through here."""

from __future__ import annotations

import os
import socket
import sys
import threading

from .client import PublisherUnavailable, connect, exchange

CHUNK = 65536


def _command() -> str:
    """One line of git's commands, read a byte at a time: after ``connect`` the same stdin
    carries the pack protocol, which a buffered read would swallow."""
    line = bytearray()
    while True:
        byte = os.read(0, 1)
        if not byte or byte == b"\n":
            return line.decode(errors="replace")
        line += byte
        if len(line) > 4096:
            raise PublisherUnavailable("git sent an overlong helper command")


def _pump_stdin(sock: socket.socket, limit: int) -> None:
    sent = 0
    try:
        while chunk := os.read(0, CHUNK):
            sent += len(chunk)
            if limit and sent > limit:
                # The publisher's receive-pack enforces the limit; this says so plainly
                # instead of git's "unpack-objects abnormal exit".
                print(f"fatal: zodex: the push is too large (more than {limit} bytes, the publisher's limit)",
                      file=sys.stderr, flush=True)  # fmt: skip
                break
            sock.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def relay(sock: socket.socket, limit: int) -> None:
    threading.Thread(target=_pump_stdin, args=(sock, limit), daemon=True).start()
    try:
        while chunk := sock.recv(CHUNK):
            view = memoryview(chunk)
            while view:
                view = view[os.write(1, view) :]
    except OSError:
        pass  # the publisher hung up: git reports what it lacks


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: git-remote-zodex <remote> <url> (git runs this for zodex:: URLs)", file=sys.stderr)
        return 2
    url = sys.argv[2]
    try:
        while True:
            command = _command()
            if command == "capabilities":
                os.write(1, b"connect\n\n")
            elif command.startswith("connect "):
                service = command.removeprefix("connect ")
                sock = connect()
                message = {"op": "git", "service": service, "url": url}
                if ticket := os.environ.get("ZODEX_PUBLISH_TICKET"):
                    message["ticket"] = ticket
                answer = exchange(sock, message)
                os.write(1, b"\n")
                limit = answer.get("max_push_bytes", 0) if service == "git-receive-pack" else 0
                with sock:
                    relay(sock, limit if isinstance(limit, int) else 0)
                return 0
            elif command == "":
                return 0
            else:
                print(f"fatal: zodex: unsupported helper command {command[:60]!r}", file=sys.stderr)
                return 128
    except PublisherUnavailable as exc:
        print(f"fatal: zodex: {exc}", file=sys.stderr)
        return 128


if __name__ == "__main__":
    sys.exit(main())
