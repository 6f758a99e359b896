"""Forwarding one client's JSON-RPC requests to whichever Local runtime runs now.

A request goes to the runtime as the client wrote it (its bytes, its id), at the revision
the client speaks: a per-request one with the ``MCP-Protocol-Version``, ``Mcp-Method`` and
``Mcp-Name`` headers the runtime checks against the body, a handshake one with the revision
``initialize`` agreed. The runtime's answer comes back as the runtime wrote it. The runtime
is looked up again in ``discovery.json`` for every request, so one bridge follows it across
``stop``, ``start`` and a new port.

One bridge is one conversation: it keeps the ``Mcp-Session-Id`` the runtime issues for its
whole life (session ids are signed with a key kept across starts) and sends it with every
request, so the runtime attributes all its calls to one agent. A client that never sends
``initialize`` (the per-request era) gets one sent on its behalf, once.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zodex_gateway.local.bridge.http11 import Client, ConnectFailed, Connection, ConnectionLost, Response
from zodex_gateway.local.bridge.revisions import (
    CLIENT_INFO_META,
    LATEST_HANDSHAKE,
    Json,
    negotiated,
    per_request_version,
)
from zodex_gateway.local.discovery import Discovery
from zodex_gateway.local.paths import LocalPaths
from zodex_system import proctree

TOKEN_HEADER = "X-Zodex-Local-Token"
SESSION_HEADER = "mcp-session-id"
# The methods whose name the runtime checks against the Mcp-Name header (the SDK's list).
NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_HEADER_SAFE = re.compile(r"[\x20-\x7e]*")
_ENCODED = re.compile(r"=\?base64\?.*\?=")
# What discovery.json names: the runtime listens on loopback over plain HTTP.
_URL = re.compile(r"http://(?P<host>[^/:\[\]]+|\[[0-9a-fA-F:.]+\]):(?P<port>[0-9]{1,5})(?P<path>/[^?#]*)?")


@dataclass(frozen=True)
class Target:
    """The running runtime as ``discovery.json`` describes it now."""

    runtime_id: str
    host: str
    port: int
    path: str
    token: str
    start_directory: str


def find(paths: LocalPaths) -> Target | None:
    """The running runtime, or None. Raises UnsafeDirectory when Local's directories are not
    safely the user's: nothing in them is trusted then."""
    paths.verify()
    discovery = Discovery.read(paths.discovery)
    if discovery is None or not proctree.is_alive(discovery.pid, discovery.pid_start):
        return None
    url = _URL.fullmatch(str(discovery.mcp.get("url", "")))
    if url is None:
        return None
    try:
        token = Path(discovery.mcp["token_path"]).read_text().strip()
    except (OSError, KeyError):
        return None  # stopped between the two reads
    host = url["host"].strip("[]")
    return Target(
        discovery.runtime_id, host, int(url["port"]), url["path"] or "/", token, discovery.start_directory
    )


def header_value(value: str) -> str:
    """``value`` as it survives an HTTP header: verbatim when printable ASCII, else in the
    ``=?base64?…?=`` form the SDK decodes (so no client text can end a header early)."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _ENCODED.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode('utf-8', 'surrogatepass')).decode('ascii')}?="


class Outcome:
    """What became of a forwarded request."""


@dataclass(frozen=True)
class Answered(Outcome):
    lines: list[bytes]  # the runtime's messages, one JSON text each: its answer last


@dataclass(frozen=True)
class NotRunning(Outcome):
    pass


@dataclass(frozen=True)
class Lost(Outcome):
    reason: str  # sent, and the connection ended before an answer


@dataclass(frozen=True)
class Refused(Outcome):
    status: int
    reason: str  # the listener's own refusal (a token that changed again, …)


@dataclass(frozen=True)
class Undeliverable(Outcome):
    reason: str  # an answer came, but not one the client can be handed


@dataclass
class InFlight:
    """A request on its way: the connection it uses, so that a cancel can cut it, and who
    hears the notifications its answer streams before it (progress)."""

    request_id: object
    notify: Callable[[bytes], None] | None = None
    per_request: bool = False  # a per-request revision's: its cancel is the cut connection
    streamed: bool = False  # its answer came in chunks, and their notifications went on
    cancelled: bool = False
    conn: Connection | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            if self.conn is not None:
                try:
                    self.conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class Forwarder:
    def __init__(self, paths: LocalPaths) -> None:
        self._paths = paths
        self._clients: dict[tuple[str, int], Client] = {}
        self._lock = threading.Lock()  # the conversation's state below
        self._session_id: str | None = None
        self._sessionless_runtime: str | None = None  # a runtime that issued no id
        self._handshake_version: str | None = None  # what initialize agreed with the client
        self._client_initialize: Json | None = None  # the client's own, replayed for a new id
        self._client_info: Json | None = None  # from a per-request client's _meta
        self.last_start_directory: str | None = None

    def close(self) -> None:
        for client in self._clients.values():
            client.close()

    def saw_initialize(self, message: Json, version: str) -> None:
        """The client's ``initialize``, answered (by the runtime or the bridge) with ``version``."""
        params = message.get("params")
        with self._lock:
            self._handshake_version = version
            self._client_initialize = params if isinstance(params, dict) else None

    def send(self, message: Json, raw: bytes, flight: InFlight) -> Outcome:
        method = message.get("method")
        self._note_client_info(message)
        for attempt in range(2):
            target = find(self._paths)
            if target is None:
                return NotRunning()
            self.last_start_directory = target.start_directory
            client = self._client(target)
            try:
                if method != "initialize":
                    self._ensure_session(target, client)
                sent_session = self._session_id
                response = self._post(target, client, self._headers(message), raw, flight)
            except ConnectFailed:
                if attempt == 0:
                    continue  # stopped or restarting right now: look again once
                return NotRunning()
            except ConnectionLost as exc:
                return Lost(str(exc))
            if response.status == 401 and attempt == 0:
                continue  # restarted with a new token between our reads: read again
            if (
                response.status == 404
                and sent_session is not None
                and attempt == 0
                and _unknown_session(response)
            ):
                self._forget_session(sent_session)  # signed with a key no longer kept: a new one
                continue
            outcome = _outcome(message, response, streamed=flight.streamed)
            if method == "initialize" and isinstance(outcome, Answered):
                self._took_initialize(message, response)
            return outcome
        return NotRunning()

    def _headers(self, message: Json) -> dict[str, str]:
        headers: dict[str, str] = {}
        version = per_request_version(message)
        method = message.get("method")
        if version is not None:
            headers["MCP-Protocol-Version"] = header_value(version)
            headers["Mcp-Method"] = header_value(str(method))
            name_key = NAME_PARAMS.get(str(method))
            params = message.get("params")
            name = params.get(name_key) if name_key and isinstance(params, dict) else None
            if isinstance(name, str):
                headers["Mcp-Name"] = header_value(name)
        elif method != "initialize" and self._handshake_version is not None:
            headers["MCP-Protocol-Version"] = self._handshake_version
        return headers

    def _note_client_info(self, message: Json) -> None:
        """A per-request client's name, for the ``initialize`` sent on its behalf."""
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        info = meta.get(CLIENT_INFO_META) if isinstance(meta, dict) else None
        if isinstance(info, dict):
            with self._lock:
                self._client_info = info

    def _ensure_session(self, target: Target, client: Client) -> None:
        """Get the conversation an id before its first call to this runtime, if it has none."""
        with self._lock:
            if self._session_id is not None or self._sessionless_runtime == target.runtime_id:
                return
            params = dict(self._client_initialize or {})
            params.setdefault("protocolVersion", self._handshake_version or LATEST_HANDSHAKE)
            params.setdefault("capabilities", {})
            params.setdefault(
                "clientInfo", self._client_info or {"name": "zodex-local-connect", "version": "0"}
            )
            body = {"jsonrpc": "2.0", "id": "zodex-local-connect", "method": "initialize", "params": params}
            response = self._post(target, client, {}, json.dumps(body).encode(), None)
            if response.status != 200:
                return  # refused (a token that just changed): the call itself will say so
            self._session_id = response.headers.get(SESSION_HEADER) or None
            if self._session_id is None:
                self._sessionless_runtime = target.runtime_id

    def _took_initialize(self, message: Json, response: Response) -> None:
        try:
            result = json.loads(response.body).get("result", {})
        except (ValueError, AttributeError):
            result = {}
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        params = message.get("params")
        requested = params.get("protocolVersion") if isinstance(params, dict) else None
        self.saw_initialize(message, version if isinstance(version, str) else negotiated(requested))
        with self._lock:
            issued = response.headers.get(SESSION_HEADER)
            if issued:
                self._session_id = issued

    def _forget_session(self, session_id: str) -> None:
        with self._lock:
            if self._session_id == session_id:
                self._session_id = None
                self._sessionless_runtime = None

    def _client(self, target: Target) -> Client:
        key = (target.host, target.port)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                # A runtime on a new port: connections to the old one are of no more use.
                for old in self._clients.values():
                    old.close()
                self._clients = {key: (client := Client(target.host, target.port))}
            return client

    def _post(
        self, target: Target, client: Client, extra: dict[str, str], body: bytes, flight: InFlight | None
    ) -> Response:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            TOKEN_HEADER: target.token,
            **extra,
        }
        if self._session_id is not None:
            headers[SESSION_HEADER] = self._session_id
        conn = client.connection()
        if flight is not None:
            with flight.lock:
                if flight.cancelled:
                    conn.close()
                    raise ConnectionLost("cancelled")
                flight.conn = conn
        notes = _StreamedNotes(flight.notify) if flight is not None and flight.notify is not None else None
        try:
            response = client.post(conn, target.path, headers, body, notes.feed if notes else None)
        except BaseException:
            conn.close()
            raise
        finally:
            if flight is not None:
                with flight.lock:
                    flight.conn = None
        if flight is not None and notes is not None:
            flight.streamed = notes.fed
        if response.headers.get("connection", "").lower() == "close":
            conn.close()
        else:
            client.release(conn)
        return response

    def cancel(self, raw: bytes) -> None:
        """Hand a handshake-era ``notifications/cancelled`` to the runtime: there, unlike the
        per-request era, cutting the request's connection is not a cancel (docs/modes.md)."""
        target = find(self._paths)
        if target is None:
            return
        client = self._client(target)
        try:
            self._post(target, client, self._headers({"method": "notifications/cancelled"}), raw, None)
        except OSError:
            pass  # the runtime went: nothing there is waiting any more


class _StreamedNotes:
    """Reads an event stream as it arrives and hands on each notification in it at once."""

    def __init__(self, notify: Callable[[bytes], None]) -> None:
        self._notify = notify
        self._pending = b""
        self.fed = False

    def feed(self, chunk: bytes) -> None:
        self.fed = True
        self._pending += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in self._pending:
            event, self._pending = self._pending.split(b"\n\n", 1)
            for data in _sse_data(event + b"\n\n"):
                if _is_notification(data):
                    self._notify(
                        data.strip() if b"\n" not in data.strip() else json.dumps(json.loads(data)).encode()
                    )


def _is_notification(data: bytes) -> bool:
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("method"), str) and "id" not in parsed


def _unknown_session(response: Response) -> bool:
    return b"Mcp-Session-Id" in response.body


def _outcome(message: Json, response: Response, *, streamed: bool = False) -> Outcome:
    """The runtime's answer to ``message`` as lines for the client, or why there are none.
    ``streamed``: the notifications in it were handed on as they came."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        texts = _sse_data(response.body)
    else:
        texts = [response.body] if response.body.strip() else []
    lines: list[bytes] = []
    answered = False
    refusal: str | None = None
    for text in texts:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return Undeliverable(f"HTTP {response.status} with a body that is not JSON ({exc})")
        if isinstance(parsed, dict) and parsed.get("jsonrpc") == "2.0":
            is_answer = "result" in parsed or "error" in parsed
            if is_answer and parsed.get("id") != message.get("id"):
                return Undeliverable(f"the answer names id {parsed.get('id')!r}, not {message.get('id')!r}")
            answered = answered or is_answer
            if streamed and not is_answer and "id" not in parsed:
                continue
            lines.append(text.strip() if b"\n" not in text.strip() else json.dumps(parsed).encode())
        elif isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            refusal = parsed["error"]
        else:
            return Undeliverable(f"HTTP {response.status} with a body that is not a JSON-RPC message")
    if answered:
        return Answered(lines)
    if refusal is not None and response.status >= 400:
        return Refused(response.status, refusal)
    return Undeliverable(f"HTTP {response.status} without an answer")


def _sse_data(body: bytes) -> list[bytes]:
    """The data of each event of a ``text/event-stream`` body."""
    events: list[bytes] = []
    data: list[bytes] = []
    for line in body.replace(b"\r\n", b"\n").split(b"\n"):
        if not line:
            if data:
                events.append(b"\n".join(data))
                data = []
        elif line.startswith(b"data:"):
            data.append(line[5:].removeprefix(b" "))
    if data:
        events.append(b"\n".join(data))
    return events
