"""Every tool through every client-facing transport of one machine, with the MCP SDK's client
at its default revision (2026-07-28) and at the handshake (docs/modes.md#revisions): each
call a result, never an error. Sprite's and the fleet's gateways: tests/sprite/serve and
tests/fleet (root)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import gateway_env, start_http_gateway
from tests.support.transports import REVISIONS, TRANSPORTS
from zodex_gateway.mcp.alias_tool import NO_IDENTITY

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("mode", list(REVISIONS))
@pytest.mark.parametrize("transport", list(TRANSPORTS))
async def test_every_tool_gives_a_result(tmp_path: Path, transport: str, mode: str) -> None:
    async with TRANSPORTS[transport](tmp_path, mode) as mcp:
        assert mcp.client.protocol_version == REVISIONS[mode]
        names = [tool.name for tool in (await mcp.client.list_tools()).tools]
        assert names[:3] == ["exec_command", "write_stdin", "apply_patch"]
        done = await mcp.exec("echo matrix", str(tmp_path))
        assert (done["output"], done["exit_code"]) == ("matrix\n", 0)
        running = await mcp.exec("read line; echo got $line", str(tmp_path), yield_time_ms=50)
        typed = await mcp.write(running["session_handle"], chars="typed\n", yield_time_ms=5000)
        assert "got typed" in typed["output"]
        patch = "*** Begin Patch\n*** Add File: made.txt\n+made\n*** End Patch\n"
        patched = await mcp.call("apply_patch", patch=patch, workdir=str(tmp_path))
        assert not patched.is_error, patched.content[0].text
        assert (tmp_path / "made.txt").read_text() == "made\n"
        refused = await mcp.error("exec_command", cmd="true", workdir="relative")
        assert refused == "workdir must be an absolute path: relative"
        named = await mcp.call("set_agent_alias", alias="revision matrix")
        if mode == "auto" and transport in ("zodex-gateway http", "Local HTTP"):
            # No handshake, no session: a 2026-07-28 request over HTTP names no conversation
            # (docs/agents.md#identity); the bridge gives its client one.
            assert named.is_error and named.content[0].text == NO_IDENTITY
        else:
            assert not named.is_error, named.content[0].text
            assert named.structured_content["alias"] == "revision matrix"


def test_the_http_status_of_each_kind_of_answer() -> None:
    """docs/modes.md#mcp-endpoint: a tool error is 200; a JSON-RPC error has the SDK's status
    (404 for an unknown method, 400 for an unsupported revision or a body that is not JSON)."""
    import httpx2

    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    with gateway_env() as env:
        gateway = start_http_gateway(env)
        try:
            headers = {"X-Zodex-Local-Token": gateway.token, "Accept": "application/json, text/event-stream"}
            with httpx2.Client(headers=headers, timeout=30) as http:

                def post(body: Any, **extra: str) -> httpx2.Response:
                    return http.post(
                        gateway.url,
                        content=json.dumps(body),
                        headers={"Content-Type": "application/json", **extra},
                    )

                call = {
                    "name": "exec_command",
                    "arguments": {"cmd": "true", "workdir": "relative"},
                    "_meta": meta,
                }
                modern = {
                    "MCP-Protocol-Version": "2026-07-28",
                    "Mcp-Method": "tools/call",
                    "Mcp-Name": "exec_command",
                }
                tool_error = post(
                    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}, **modern
                )
                assert tool_error.status_code == 200 and tool_error.json()["result"]["isError"] is True
                unknown = post({"jsonrpc": "2.0", "id": 2, "method": "zodex/nothing", "params": {"_meta": meta}},
                               **{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "zodex/nothing"})  # fmt: skip
                assert unknown.status_code == 404 and unknown.json()["error"]["code"] == -32601
                future = {**meta, "io.modelcontextprotocol/protocolVersion": "2027-01-01"}
                unsupported = post({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": future}},
                                   **{"MCP-Protocol-Version": "2027-01-01", "Mcp-Method": "tools/list"})  # fmt: skip
                assert unsupported.status_code == 400 and unsupported.json()["error"]["code"] == -32022
                not_json = http.post(
                    gateway.url, content=b"{nope", headers={"Content-Type": "application/json"}
                )
                assert not_json.status_code == 400 and not_json.json()["error"]["code"] == -32700
        finally:
            gateway.stop()
