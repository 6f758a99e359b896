"""Zodex's HTTP clients never go through a proxy named in the environment
(docs/architecture.md#dependencies): `zodex local start`'s MCP check sends the MCP token and
the terminal viewer sends the observer's bearer, and neither may reach whoever
``HTTP_PROXY`` names. Both talk to a loopback listener here, with every proxy variable
pointing at a loopback socket that records whatever reaches it."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from zodex_gateway.local.discovery import Discovery
from zodex_gateway.local.lifecycle import _check_answers_mcp
from zodex_gateway.local.observer_access import ObserverAccess
from zodex_gateway.viewers.tui.client import ObserverClient

SECRET = "zodex-test-secret-0123456789abcdef"


class Loopback:
    """A loopback listener that keeps each request it is sent; it answers ``reply`` (a JSON
    body) or, as a stand-in proxy, closes the connection unanswered."""

    def __init__(self, reply: bytes | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.reply = reply
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                request = self._read_request(conn)
                self.received.append(request)
                if self.reply is not None:
                    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(self.reply)}"
                    conn.sendall(f"{head}\r\nConnection: close\r\n\r\n".encode() + self.reply)

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*([0-9]+)", head)
        while length is not None and len(body) < int(length.group(1)):
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return head

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


ANSWER = {"jsonrpc": "2.0", "id": 1, "result": {}}


@pytest.fixture
def server() -> Iterator[Loopback]:
    listener = Loopback(json.dumps(ANSWER).encode())
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loopback]:
    listener = Loopback()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, listener.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield listener
    finally:
        listener.close()


def header(request: bytes, name: str) -> str | None:
    found = re.search(rb"(?im)^" + name.encode() + rb":\s*(.*?)\r?$", request)
    return None if found is None else found.group(1).decode()


def test_local_starts_check_sends_the_token_to_the_runtime_only(
    server: Loopback, proxy: Loopback, tmp_path: Path
) -> None:
    token = tmp_path / "mcp-token"
    token.write_text(SECRET + "\n")
    discovery = Discovery(
        runtime_id="r",
        pid=1,
        pid_start=None,
        start_directory="/",
        started_at="now",
        expires_at=None,
        mcp={"url": f"{server.url}/mcp", "token_path": str(token)},
        runtime_dir=str(tmp_path),
    )
    _check_answers_mcp(discovery)
    assert [header(seen, "X-Zodex-Local-Token") for seen in server.received] == [SECRET]
    assert proxy.received == []


async def test_the_terminal_viewer_sends_the_bearer_to_the_observer_only(
    server: Loopback, proxy: Loopback
) -> None:
    client = ObserverClient(ObserverAccess(base_url=server.url, bearer=SECRET, runtime_id="r"))
    try:
        assert await client.status() == ANSWER
    finally:
        await client.aclose()
    assert [header(seen, "Authorization") for seen in server.received] == [f"Bearer {SECRET}"]
    assert proxy.received == []
