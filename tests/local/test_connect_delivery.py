"""What `zodex local connect` sends to the runtime and hands back, against a stand-in runtime
that answers as scripted: the headers of each revision, answers it cannot deliver, refusals,
a connection lost mid-answer, a streamed answer, a cancel (docs/modes.md#zodex-local-connect)."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.local import LocalEnv, local_env
from tests.support.raw_bridge import RawBridge, modern
from zodex_system import proctree

pytestmark = pytest.mark.timeout(60)

SESSION = "z-stand-in-session"
Answer = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]


def reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", headers.pop("content_type", "application/json"))
    handler.send_header("Content-Length", str(len(body)))
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.write(body)


def result(message: dict[str, Any], value: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": value}).encode()


@dataclass
class StandIn:
    """A listener posing as the runtime: records each request, answers by method."""

    answers: dict[str, Answer] = field(default_factory=dict)
    seen: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)  # a held request has arrived
    dropped: threading.Event = field(default_factory=threading.Event)  # ...and its client left

    def handler(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if body["method"] == "initialize":
                    reply(self, 200, result(body, {"protocolVersion": "2025-11-25"}), mcp_session_id=SESSION)
                    return
                stand_in.answers[body["method"]](self, body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@contextmanager
def standing_in(local: LocalEnv, tmp_path: Path) -> Iterator[StandIn]:
    stand_in = StandIn()
    server = ThreadingHTTPServer(("127.0.0.1", 0), stand_in.handler())
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    local.run("local", "setup")
    runtime = local.discovery_file.parent
    token = runtime / "mcp-token"
    token.write_text("stand-in-token\n")
    token.chmod(0o600)
    me = proctree.read_proc(os.getpid())
    assert me is not None
    discovery = {
        "runtime_id": "standin00000",
        "pid": os.getpid(),
        "pid_start": me.start,  # this test's process: alive for as long as the test runs
        "start_directory": str(tmp_path),
        "started_at": "2026-12-02T00:00:00Z",
        "expires_at": None,
        "mcp": {"url": f"http://127.0.0.1:{server.server_address[1]}/mcp", "token_path": str(token)},
        "runtime_dir": str(tmp_path),
        "observability": {},
    }
    local.discovery_file.write_text(json.dumps(discovery))
    try:
        yield stand_in
    finally:
        server.shutdown()
        server.server_close()
        local.discovery_file.unlink(missing_ok=True)


def call(tool: str = "exec_command", envelope: bool = True, request_id: object = 7) -> dict[str, Any]:
    params = {"name": tool, "arguments": {"cmd": "true", "workdir": "/"}}
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": modern(params) if envelope else params,
    }


def tool_text(answer: dict[str, Any]) -> str:
    assert answer["result"]["isError"] is True, answer
    text: str = answer["result"]["content"][0]["text"]
    return text


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[StandIn, RawBridge]]:
    with local_env() as local, standing_in(local, tmp_path) as stand_in:
        bridge = RawBridge(local)
        try:
            yield stand_in, bridge
        finally:
            bridge.close()


def test_a_per_request_call_carries_its_revision_headers_and_the_conversations_session(
    rig: tuple[StandIn, RawBridge],
) -> None:
    stand_in, bridge = rig
    stand_in.answers["tools/call"] = lambda h, m: reply(
        h, 200, result(m, {"content": [], "resultType": "complete"})
    )
    answer = bridge.ask(call("exec_command"))
    assert answer == {"jsonrpc": "2.0", "id": 7, "result": {"content": [], "resultType": "complete"}}
    tricky = "ünï\r\nX-Injected: 1"
    bridge.ask(call(tricky))
    (init_headers, init), (headers, body), (tricky_headers, _) = stand_in.seen
    assert init["method"] == "initialize" and "mcp-session-id" not in init_headers
    assert init["params"]["clientInfo"] == {"name": "raw-bridge-test", "version": "0"}, (
        "the client's own name"
    )
    assert headers["mcp-protocol-version"] == "2026-07-28"
    assert (headers["mcp-method"], headers["mcp-name"]) == ("tools/call", "exec_command")
    assert headers["mcp-session-id"] == SESSION and headers["x-zodex-local-token"] == "stand-in-token"
    assert body == call("exec_command"), "the request as the client wrote it"
    encoded = tricky_headers["mcp-name"]
    assert base64.b64decode(encoded.removeprefix("=?base64?").removesuffix("?=")).decode() == tricky
    assert "x-injected" not in tricky_headers


def test_a_handshake_call_carries_the_agreed_revision(rig: tuple[StandIn, RawBridge]) -> None:
    stand_in, bridge = rig
    opening = {
        "protocolVersion": "2025-03-26",
        "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"},
    }
    answer = bridge.ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": opening})
    assert answer["result"] == {"protocolVersion": "2025-11-25"}, "the runtime's answer, as it sent it"
    stand_in.answers["tools/call"] = lambda h, m: reply(h, 200, result(m, {"content": []}))
    bridge.ask(call(envelope=False))
    (_, init), (headers, _) = stand_in.seen
    assert init["params"] == opening, "the client's own initialize"
    assert headers["mcp-protocol-version"] == "2025-11-25" and headers["mcp-session-id"] == SESSION
    assert "mcp-method" not in headers


@pytest.mark.parametrize("envelope", [False, True], ids=["handshake", "2026-07-28"])
def test_an_answer_that_cannot_be_handed_back_says_the_call_ran(
    rig: tuple[StandIn, RawBridge], envelope: bool
) -> None:
    stand_in, bridge = rig
    ran = "the call ran on the runtime but its result could not be delivered: "
    stand_in.answers["tools/call"] = lambda h, m: reply(h, 200, b"<html>oops</html>")
    answer = bridge.ask(call(envelope=envelope))
    assert tool_text(answer).startswith(ran + "HTTP 200 with a body that is not JSON")
    assert ("resultType" in answer["result"]) is envelope, "shaped for the client's revision"
    stand_in.answers["tools/call"] = lambda h, m: reply(h, 200, result({"id": 99}, {"content": []}))
    assert tool_text(bridge.ask(call(envelope=envelope))) == ran + "the answer names id 99, not 7"
    stand_in.answers["tools/call"] = lambda h, m: reply(h, 202, b"")
    assert tool_text(bridge.ask(call(envelope=envelope))) == ran + "HTTP 202 without an answer"


def test_a_refusal_of_the_listener_names_its_status(rig: tuple[StandIn, RawBridge]) -> None:
    stand_in, bridge = rig
    refused = json.dumps({"error": "missing or invalid token"}).encode()
    stand_in.answers["tools/call"] = stand_in.answers["tools/list"] = lambda h, m: reply(h, 401, refused)
    assert tool_text(bridge.ask(call())) == "Zodex Local answered HTTP 401: missing or invalid token"
    listing = bridge.ask({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": modern()})
    assert listing["error"] == {
        "code": -32603,
        "message": "Zodex Local answered HTTP 401: missing or invalid token",
    }
    calls = [body for _, body in stand_in.seen if body["method"] == "tools/call"]
    assert len(calls) == 2, "one retry with the token read again, then the refusal"


def test_a_connection_lost_mid_answer(rig: tuple[StandIn, RawBridge]) -> None:
    stand_in, bridge = rig

    def cut(handler: BaseHTTPRequestHandler, message: dict[str, Any]) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "100")
        handler.end_headers()
        handler.wfile.write(b'{"jsonrpc"')
        handler.close_connection = True

    stand_in.answers["tools/call"] = stand_in.answers["tools/list"] = cut
    lost = tool_text(bridge.ask(call()))
    assert (
        lost
        == "Zodex Local did not answer the call (the answer ended after 10 of 100 bytes); it may have stopped"
    )
    listing = bridge.ask({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": modern()})
    assert next(tool["name"] for tool in listing["result"]["tools"]) == "exec_command", (
        "nothing ran: its own answer"
    )


def test_a_streamed_answer_comes_back_message_by_message(rig: tuple[StandIn, RawBridge]) -> None:
    stand_in, bridge = rig
    progress = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": 1, "progress": 1},
    }

    def stream(handler: BaseHTTPRequestHandler, message: dict[str, Any]) -> None:
        events = f"event: message\ndata: {json.dumps(progress)}\n\n"
        events += f"event: message\ndata: {result(message, {'content': []}).decode()}\n\n"
        reply(handler, 200, events.encode(), content_type="text/event-stream")

    stand_in.answers["tools/call"] = stream
    bridge.send(call())
    assert bridge.next_message() == progress
    assert bridge.next_message() == {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}


def test_a_cancelled_call_is_cut_and_never_answered(rig: tuple[StandIn, RawBridge]) -> None:
    stand_in, bridge = rig

    def hold(handler: BaseHTTPRequestHandler, message: dict[str, Any]) -> None:
        stand_in.held.set()
        if handler.rfile.read(1) == b"":  # blocks until the bridge closes the connection
            stand_in.dropped.set()

    stand_in.answers["tools/call"] = hold
    bridge.send(call(request_id="slow"))
    assert stand_in.held.wait(30)
    bridge.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "slow"}})
    assert stand_in.dropped.wait(30), "the cancel closed the runtime's connection"
    stand_in.answers["ping"] = lambda h, m: reply(h, 200, result(m, {}))
    assert bridge.nothing_more(), "no answer for the cancelled call"
