"""A stdio connection behaves as the MCP SDK's does at each revision (docs/modes.md#revisions):
raw JSON-RPC lines to a real stdio gateway, its real workers and PTYs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION

from tests.support.gate import Gate
from tests.support.gateway import GatewayEnv
from tests.support.raw_stdio import RawStdioGateway
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": LATEST_MODERN_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}
INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


@pytest.fixture
def bare(genv: GatewayEnv) -> Iterator[RawStdioGateway]:
    """A gateway nobody has said anything to yet."""
    gw = RawStdioGateway(genv, handshake=False)
    try:
        yield gw
    finally:
        gw.finish()


def send(gw: RawStdioGateway, request_id: Any, method: str, params: dict[str, Any]) -> None:
    gw.send_line(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))


def exec_call(workdir: Path, cmd: str, **more: Any) -> dict[str, Any]:
    return {"name": "exec_command", "arguments": {"cmd": cmd, "workdir": str(workdir), **more}}


def test_a_call_before_initialize_is_refused_as_the_sdk_refuses_it(
    bare: RawStdioGateway, tmp_path: Path
) -> None:
    send(bare, 1, "tools/call", exec_call(tmp_path, "touch ran"))
    reply = bare.next_message()
    assert reply["id"] == 1 and reply["error"]["code"] == -32602, reply
    send(bare, 2, "initialize", INIT)
    assert bare.next_message()["result"]["protocolVersion"] == "2025-06-18"
    send(bare, 3, "tools/call", exec_call(tmp_path, "echo served"))
    reply = bare.next_message()
    assert reply["id"] == 3 and reply["result"]["structuredContent"]["output"] == "served\n"
    assert not (tmp_path / "ran").exists(), "the refused call ran"


def test_calls_are_served_at_the_version_initialize_was_answered_with(
    bare: RawStdioGateway, tmp_path: Path
) -> None:
    send(bare, 1, "initialize", {**INIT, "protocolVersion": "1999-01-01"})
    assert bare.next_message()["result"]["protocolVersion"] == LATEST_HANDSHAKE_VERSION
    send(bare, 2, "tools/call", exec_call(tmp_path, "echo served"))
    reply = bare.next_message()
    assert reply["id"] == 2 and reply["result"]["structuredContent"]["output"] == "served\n"
    send(bare, 3, "initialize", {**INIT, "protocolVersion": "2024-11-05"})
    assert bare.next_message()["result"]["protocolVersion"] == "2024-11-05"
    send(bare, 4, "tools/call", exec_call(tmp_path, "echo again"))
    assert json.loads(bare.next_message()["result"]["content"][0]["text"])["output"] == "again\n"


def test_an_enveloped_call_on_a_handshake_connection_is_refused(
    bare: RawStdioGateway, tmp_path: Path
) -> None:
    send(bare, 1, "initialize", INIT)
    bare.next_message()
    send(bare, 2, "tools/call", {**exec_call(tmp_path, "touch ran"), "_meta": ENVELOPE})
    reply = bare.next_message()
    assert reply["id"] == 2 and reply["error"]["code"] == -32600, reply
    assert not (tmp_path / "ran").exists()


def test_a_2026_connection_is_served_call_after_call(bare: RawStdioGateway, tmp_path: Path) -> None:
    for request_id in ("a", "b", "c"):
        send(bare, request_id, "tools/call", {**exec_call(tmp_path, f"echo {request_id}"), "_meta": ENVELOPE})
        reply = bare.next_message()
        assert reply["id"] == request_id
        assert reply["result"]["resultType"] == "complete"
        assert reply["result"]["structuredContent"]["output"] == f"{request_id}\n"
        assert "io.modelcontextprotocol/serverInfo" in reply["result"]["_meta"]
    send(bare, "d", "initialize", INIT)
    assert bare.next_message()["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION, (
        "initialize is refused on a 2026 connection"
    )


def test_calls_run_side_by_side_and_each_answer_carries_its_id(genv: GatewayEnv, tmp_path: Path) -> None:
    gw = RawStdioGateway(genv)
    gate = Gate.make(tmp_path)
    try:
        # The slow call's command waits at the gate until the fast call has been answered.
        send(gw, 10, "tools/call", exec_call(tmp_path, f"{gate.wait}; echo slow", yield_time_ms=30000))
        send(gw, 11, "tools/call", exec_call(tmp_path, "echo fast"))
        first = gw.next_message()
        gate.release_now()
        second = gw.next_message()
        assert (first["id"], second["id"]) == (11, 10), "the fast call waited for the slow one"
        assert second["result"]["structuredContent"]["output"] == "slow\n"
    finally:
        gw.finish()


def test_a_call_the_client_cancels_is_never_answered(genv: GatewayEnv, tmp_path: Path) -> None:
    gw = RawStdioGateway(genv)
    try:
        gate = Gate.make(tmp_path)
        command = f"echo started > mark; {gate.wait}; echo done > end"
        send(gw, 20, "tools/call", exec_call(tmp_path, command, yield_time_ms=30000))
        wait_until(lambda: (tmp_path / "mark").exists(), what="the command started")
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 20}}
        gw.send_line(json.dumps(cancel))
        send(gw, 21, "tools/list", {})
        assert gw.next_message()["id"] == 21
        gate.release_now()
        # Once the command has ended, an answer to the cancelled call would come before this one.
        wait_until(lambda: (tmp_path / "end").exists(), what="the command ended")
        send(gw, 22, "tools/call", exec_call(tmp_path, "echo after"))
        reply = gw.next_message()
        assert reply["id"] == 22, f"answered the cancelled call: {reply}"
        assert reply["result"]["structuredContent"]["output"] == "after\n"
    finally:
        gw.finish()


def test_at_the_end_of_input_a_running_call_is_answered_connection_closed(
    genv: GatewayEnv, tmp_path: Path
) -> None:
    gw = RawStdioGateway(genv)
    try:
        send(gw, 30, "tools/call", exec_call(tmp_path, "echo started > mark; sleep 30", yield_time_ms=30000))
        wait_until(lambda: (tmp_path / "mark").exists(), what="the command started")
        gw.close_stdin()
        reply = gw.next_message()
        assert reply == {
            "jsonrpc": "2.0",
            "id": 30,
            "error": {"code": -32000, "message": "Connection closed"},
        }
        assert gw.process.wait(timeout=20) == 0
    finally:
        gw.finish()


@pytest.mark.parametrize("bad_id", [True, {"a": 1}, None, 1.5], ids=["true", "object", "null", "float"])
def test_a_request_whose_id_is_not_a_string_or_an_integer_is_answered_and_not_run(
    genv: GatewayEnv, tmp_path: Path, bad_id: Any
) -> None:
    gw = RawStdioGateway(genv)
    try:
        send(gw, bad_id, "tools/call", exec_call(tmp_path, "touch ran"))
        assert gw.next_message() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "Invalid Request: a tools/call request needs an id that is a string or an integer",
            },
        }
        assert (
            gw.call("exec_command", cmd="echo next", workdir=str(tmp_path))["structuredContent"]["output"]
            == "next\n"
        )
        assert not (tmp_path / "ran").exists(), "the refused call ran"
    finally:
        gw.finish()


def test_a_call_nested_deeper_than_the_sdk_parses_is_refused_and_not_run(
    genv: GatewayEnv, tmp_path: Path
) -> None:
    nested: Any = "x"
    for _ in range(300):
        nested = [nested]
    gw = RawStdioGateway(genv)
    try:
        send(gw, 5, "tools/call", exec_call(tmp_path, "touch ran", env={"DEEP": nested}))
        reply = gw.next_message()
        assert reply["id"] is None and reply["error"]["code"] == -32700, reply
        assert (
            gw.call("exec_command", cmd="echo next", workdir=str(tmp_path))["structuredContent"]["output"]
            == "next\n"
        )
        assert not (tmp_path / "ran").exists(), "the refused call ran"
    finally:
        gw.finish()


@pytest.mark.parametrize(
    "initialize_line",
    [
        # A surrogate pair is valid JSON (one character), NaN is accepted by the SDK's parser.
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
        '"capabilities":{},"clientInfo":{"name":"raw \\ud83d\\ude00","version":"0"}}}',
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
        '"capabilities":{"x":NaN},"clientInfo":{"name":"raw","version":"0"}}}',
    ],
    ids=["surrogate-pair", "nan"],
)
def test_an_unusual_initialize_still_makes_a_handshake_connection(
    bare: RawStdioGateway, tmp_path: Path, initialize_line: str
) -> None:
    bare.send_line(initialize_line)
    assert bare.next_message()["result"]["protocolVersion"] == "2025-06-18"
    send(bare, 1, "tools/call", {**exec_call(tmp_path, "touch ran"), "_meta": ENVELOPE})
    reply = bare.next_message()
    assert reply["id"] == 1 and reply["error"]["code"] == -32600, reply
    assert not (tmp_path / "ran").exists(), "a 2026-07-28 call ran on a handshake connection"
