"""A tool call with no identity, as a plain HTTP client (MCP Inspector, curl) makes one:
one JSON-RPC ``tools/call`` POST with the token, no ``initialize``, no ``Mcp-Session-Id``
and no ``_meta``. The runtime serves it and records it with no agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2

from tests.support.local import LocalEnv
from tests.support.slowdown import scaled

PROTOCOL_VERSION = "2025-06-18"


async def unattributed_call(local: LocalEnv, tool: str, **arguments: Any) -> dict[str, Any]:
    """The call's structured result; fails the test on an error."""
    mcp = local.discovery()["mcp"]
    token = Path(mcp["token_path"]).read_text().strip()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    headers = {
        "X-Zodex-Local-Token": token,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL_VERSION,
    }
    async with httpx2.AsyncClient(timeout=scaled(30)) as client:
        response = await client.post(mcp["url"], json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert "mcp-session-id" not in response.headers, "a call without initialize gets no session"
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        answer = json.loads(data[-1])
    else:
        answer = response.json()
    result = answer["result"]
    assert not result.get("isError"), result
    structured: dict[str, Any] = result.get("structuredContent") or {}
    return structured
