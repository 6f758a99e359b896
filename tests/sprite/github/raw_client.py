"""Run as the agent: speaks to the publisher's socket directly, as a hostile agent would.
``python raw_client.py <socket> line <json>`` sends one request line and prints the answer;
``python raw_client.py <socket> push <repo> <ref>`` asks for receive-pack and sends one ref
update (the main branch's commit to ``ref``) with an empty pack, printing what comes back."""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import sys


def pkt(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    if mode == "line":
        sock.sendall(sys.argv[3].encode() + b"\n")
        print(sock.recv(65536).decode(errors="replace"))
        return
    repo, ref = sys.argv[3], sys.argv[4]
    sock.sendall(
        json.dumps({"op": "git", "service": "git-receive-pack", "url": f"https://github.com/{repo}"}).encode()
        + b"\n"
    )
    answer = b""
    while not answer.endswith(b"\n"):
        answer += sock.recv(1)
    print(answer.decode().strip())
    if b'"ok":true' not in answer:
        return
    advert = b""
    while not advert.endswith(b"0000"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        advert += chunk
    main_oid = next(line[4:44] for line in advert.split(b"\n") if b"refs/heads/main" in line)
    update = b"0" * 40 + b" " + main_oid + b" " + ref.encode() + b"\0report-status\n"
    empty = b"PACK" + struct.pack(">II", 2, 0)
    sock.sendall(pkt(update) + b"0000" + empty + hashlib.sha1(empty).digest())
    sock.shutdown(socket.SHUT_WR)
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    print(reply.decode(errors="replace"))


if __name__ == "__main__":
    main()
