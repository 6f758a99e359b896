"""A small HTTP/1.1 client for one loopback listener: ``POST`` a body, read the answer.

The bridge's only HTTP need is a JSON body to the Local runtime and its answer back, so
this is a few dozen lines on a socket rather than ``http.client`` (whose import, with
``email``'s parser, costs more than the rest of the bridge's start). Connections are kept
alive and reused; an idle one is dropped when the peer has closed it or it has been idle
long enough that the listener may close it while a request is on the way, so a request is
never sent twice.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

CONNECT_TIMEOUT = 5.0  # a loopback port either answers at once or not at all
# Below the listener's keep-alive timeout (uvicorn's default 5 s): an idle connection older
# than this could be closed by the listener while our request is in flight.
IDLE_REUSE = 3.0
MAX_IDLE = 4
MAX_HEAD = 64 * 1024  # status line and headers


class ConnectFailed(OSError):
    """Nothing was sent: no listener at the address (the runtime is down or restarting)."""


class ConnectionLost(OSError):
    """The request was sent, and the connection ended before a whole answer came back."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


class Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.idle_since = time.monotonic()

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self.sock.close()

    def reusable(self) -> bool:
        """Idle for a short while and not readable (a readable idle socket is closed or broken)."""
        if time.monotonic() - self.idle_since > IDLE_REUSE:
            return False
        readable, _, _ = select.select([self.sock], [], [], 0)
        return not readable


class Client:
    """Requests to one ``host:port``; safe to use from several threads at once."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def connection(self) -> Connection:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if conn.reusable():
                    return conn
                conn.close()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            raise ConnectFailed(exc.errno, exc.strerror or str(exc)) from None
        sock.settimeout(None)  # a call may run as long as session.yield-max allows
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Connection(sock)

    def release(self, conn: Connection) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def post(
        self,
        conn: Connection,
        path: str,
        headers: dict[str, str],
        body: bytes,
        on_chunk: Callable[[bytes], None] | None = None,
    ) -> Response:
        """Send on ``conn`` and read the whole answer; the caller releases or closes ``conn``.
        ``on_chunk`` hears each chunk of a chunked answer as it arrives (an event stream's
        notifications come before its end)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            conn.sock.sendall(head + body)
            return _read_response(conn, on_chunk)
        except ConnectionLost:
            raise
        except (OSError, ValueError) as exc:
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from None


def _read_response(conn: Connection, on_chunk: Callable[[bytes], None] | None) -> Response:
    status_line = _line(conn)
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ConnectionLost(f"not an HTTP response: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    size = len(status_line)
    while line := _line(conn):
        size += len(line)
        if size > MAX_HEAD:
            raise ConnectionLost("response headers too large")
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _chunked(conn, on_chunk)
    elif "content-length" in headers:
        body = _exactly(conn, int(headers["content-length"]))
    else:
        body = conn.reader.read()  # delimited by the end of the connection
        headers["connection"] = "close"
    return Response(int(parts[1]), headers, body)


def _line(conn: Connection) -> str:
    raw = conn.reader.readline(MAX_HEAD + 1)
    if not raw:
        raise ConnectionLost("the connection closed before an answer")
    if not raw.endswith(b"\n"):
        raise ConnectionLost("response line too long or cut short")
    return raw.rstrip(b"\r\n").decode("latin-1")


def _exactly(conn: Connection, count: int) -> bytes:
    data = conn.reader.read(count)
    if len(data) != count:
        raise ConnectionLost(f"the answer ended after {len(data)} of {count} bytes")
    return data


def _chunked(conn: Connection, on_chunk: Callable[[bytes], None] | None) -> bytes:
    chunks: list[bytes] = []
    while True:
        size = int(_line(conn).split(";", 1)[0], 16)
        if size == 0:
            while _line(conn):  # trailers, then the blank line
                pass
            return b"".join(chunks)
        chunk = _exactly(conn, size)
        chunks.append(chunk)
        _line(conn)  # the CRLF after each chunk
        if on_chunk is not None:
            on_chunk(chunk)
