"""``zodex local mcp-config``: the snippet a user pastes into an MCP client to connect."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from zodex_gateway.local.discovery import Discovery

CLIENTS = ("claude", "codex", "cursor", "json")


def gateway_command() -> str:
    beside = Path(sys.executable).parent / "zodex-gateway"
    return str(beside) if beside.exists() else (shutil.which("zodex-gateway") or "zodex-gateway")


def snippet(client: str, running: Discovery | None) -> str:
    """Connect over HTTP to the running runtime when there is one, else over stdio."""
    if running is not None:
        token = Path(running.mcp["token_path"]).read_text().strip()
        return _http(client, running.mcp["url"], token)
    return _stdio(client, gateway_command())


def _stdio(client: str, command: str) -> str:
    if client == "codex":
        return f'[mcp_servers.zodex]\ncommand = {json.dumps(command)}\nargs = ["stdio"]\n'
    if client == "json":
        return json.dumps({"transport": "stdio", "command": command, "args": ["stdio"]}, indent=2)
    return json.dumps({"mcpServers": {"zodex": {"command": command, "args": ["stdio"]}}}, indent=2)


def _http(client: str, url: str, token: str) -> str:
    headers = {"X-Zodex-Local-Token": token}
    if client == "codex":
        return (
            f"[mcp_servers.zodex]\nurl = {json.dumps(url)}\n"
            f"http_headers = {{ X-Zodex-Local-Token = {json.dumps(token)} }}\n"
        )
    if client == "claude":
        server = {"type": "http", "url": url, "headers": headers}
        return json.dumps({"mcpServers": {"zodex": server}}, indent=2)
    if client == "cursor":
        return json.dumps({"mcpServers": {"zodex": {"url": url, "headers": headers}}}, indent=2)
    return json.dumps({"transport": "streamable-http", "url": url, "headers": headers}, indent=2)
