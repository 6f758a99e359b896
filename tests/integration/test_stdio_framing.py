"""Every stdio line gets an answer (docs/modes.md#transports, docs/tools.md#errors): a line
that is not JSON gets -32700 with id null, JSON that is not a JSON-RPC message gets -32600,
and a string holding an unpaired surrogate is refused naming its field — through the real
stdio gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import GatewayEnv
from tests.support.raw_stdio import RawStdioGateway

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def gateway(genv: GatewayEnv) -> Iterator[RawStdioGateway]:
    gw = RawStdioGateway(genv)
    try:
        yield gw
    finally:
        gw.finish()


def test_a_line_that_is_not_json_gets_a_parse_error(gateway: RawStdioGateway) -> None:
    gateway.send_line("this is not json")
    reply = gateway.next_message()
    assert reply["jsonrpc"] == "2.0" and reply["id"] is None
    assert reply["error"]["code"] == -32700
    assert reply["error"]["message"].startswith("Parse error: ")


def test_json_that_is_not_a_message_gets_invalid_request_and_blank_lines_none(
    gateway: RawStdioGateway,
) -> None:
    gateway.send_line("")
    gateway.send_line('{"id": 41, "hello": "world"}')
    reply = gateway.next_message()
    assert reply["id"] == 41 and reply["error"]["code"] == -32600, "the blank line got no answer"
    assert gateway.request("tools/list", {})["tools"], "the gateway still serves"


def test_an_unpaired_surrogate_is_a_tool_error_naming_the_field(
    gateway: RawStdioGateway, tmp_path: Path
) -> None:
    call = {"name": "exec_command", "arguments": {"cmd": "echo \ud800 > made", "workdir": str(tmp_path)}}
    gateway.send_line(json.dumps({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": call}))
    reply = gateway.next_message()
    assert reply == {
        "jsonrpc": "2.0",
        "id": 77,
        "result": {
            "content": [{"type": "text", "text": "cmd must be valid Unicode (unpaired surrogate)"}],
            "isError": True,
        },
    }
    assert not (tmp_path / "made").exists(), "nothing ran"
    patch = {"patch": "*** Begin Patch\n*** Add File: \udc00\n+x\n*** End Patch", "workdir": str(tmp_path)}
    gateway.send_line(json.dumps({"jsonrpc": "2.0", "id": 78, "method": "tools/call",
                                   "params": {"name": "apply_patch", "arguments": patch}}))  # fmt: skip
    assert gateway.next_message()["result"]["content"][0]["text"] == (
        "patch must be valid Unicode (unpaired surrogate)"
    )
    result = gateway.call("exec_command", cmd="echo fine", workdir=str(tmp_path))
    assert result["structuredContent"]["output"].strip() == "fine"
