"""The JSON-RPC messages a test sends to open an MCP handshake over HTTP by hand."""

from __future__ import annotations

from typing import Any, Final

INIT: Final[dict[str, Any]] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
# What the Accept and Content-Type of a streamable HTTP request must say.
ACCEPT: Final = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
