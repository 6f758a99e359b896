"""Zodex's HTTP clients never go through a proxy named in the environment
(docs/architecture.md#dependencies): `zodex local start`'s MCP check sends the MCP token and
the terminal viewer sends the observer's bearer, and neither may reach whoever
``HTTP_PROXY`` names. Both talk to a real loopback server here, with every proxy variable
pointing at a loopback socket that records whatever reaches it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from zodex_gateway.local.discovery import Discovery
from zodex_gateway.local.lifecycle import _check_answers_mcp
from zodex_gateway.local.observer_access import ObserverAccess
from zodex_gateway.viewers.tui.client import ObserverClient

SECRET = "zodex-test-secret-0123456789abcdef"


class Recorder:
    """A listening socket that keeps the first bytes of every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
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
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(65536))
                except OSError:
                    self.received.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


class Answer(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []

    def _answer(self) -> None:
        Answer.seen.append(dict(self.headers))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Answer.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, recorder.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield recorder
    finally:
        recorder.close()


def test_local_starts_check_sends_the_token_to_the_runtime_only(
    server: str, proxy: Recorder, tmp_path: Path
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
        mcp={"url": f"{server}/mcp", "token_path": str(token)},
        runtime_dir=str(tmp_path),
    )
    _check_answers_mcp(discovery)
    assert [seen.get("X-Zodex-Local-Token") for seen in Answer.seen] == [SECRET]
    assert proxy.received == []


async def test_the_terminal_viewer_sends_the_bearer_to_the_observer_only(
    server: str, proxy: Recorder
) -> None:
    client = ObserverClient(ObserverAccess(base_url=server, bearer=SECRET, runtime_id="r"))
    try:
        assert await client.status() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    finally:
        await client.aclose()
    assert [seen.get("Authorization") for seen in Answer.seen] == [f"Bearer {SECRET}"]
    assert proxy.received == []
