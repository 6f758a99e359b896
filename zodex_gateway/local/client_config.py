"""``zodex local mcp-config``: what a person pastes into an MCP client to connect, in the
exact shape that client's own configuration takes (docs/modes.md#client-entries).

By default the entry starts ``zodex local connect``, which finds the running runtime on
every call and so survives restarts, and whose configuration holds no token. With
``--http`` it is the running runtime's URL and token header instead.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.config.operator_command import zodex_path
from zodex_gateway.local.discovery import Discovery

CLIENTS = ("claude", "codex", "cursor", "json")
CONNECT_ARGS = ["local", "connect"]
TOKEN_HEADER = "X-Zodex-Local-Token"


@dataclass(frozen=True)
class Snippet:
    where: str  # one line saying where the text goes, printed apart from it
    text: str  # exactly what to paste


def connect_snippet(client: str) -> Snippet:
    """The stdio entry that starts ``<zodex> local connect``."""
    command = zodex_path()
    if client == "claude":
        server: dict[str, object] = {"type": "stdio", "command": command, "args": CONNECT_ARGS}
        return Snippet(_CLAUDE_WHERE, _claude_add(server))
    if client == "codex":
        text = f"[mcp_servers.zodex]\ncommand = {json.dumps(command)}\nargs = {json.dumps(CONNECT_ARGS)}"
        return Snippet(_CODEX_WHERE, text)
    if client == "cursor":
        entry = {"mcpServers": {"zodex": {"command": command, "args": CONNECT_ARGS}}}
        return Snippet(_CURSOR_WHERE, json.dumps(entry, indent=2))
    generic = {"transport": "stdio", "command": command, "args": CONNECT_ARGS}
    return Snippet(_JSON_WHERE, json.dumps(generic, indent=2))


def http_snippet(client: str, running: Discovery) -> Snippet:
    """The running runtime's URL and token header: good until its token changes (every
    start unless ``mcp.token = persistent``) or its port does."""
    url = running.mcp["url"]
    token = Path(running.mcp["token_path"]).read_text().strip()
    headers = {TOKEN_HEADER: token}
    if client == "claude":
        return Snippet(_CLAUDE_WHERE, _claude_add({"type": "http", "url": url, "headers": headers}))
    if client == "codex":
        text = (
            f"[mcp_servers.zodex]\nurl = {json.dumps(url)}\n"
            f"http_headers = {{ {TOKEN_HEADER} = {json.dumps(token)} }}"
        )
        return Snippet(_CODEX_WHERE, text)
    if client == "cursor":
        entry = {"mcpServers": {"zodex": {"url": url, "headers": headers}}}
        return Snippet(_CURSOR_WHERE, json.dumps(entry, indent=2))
    generic = {"transport": "streamable-http", "url": url, "headers": headers}
    return Snippet(_JSON_WHERE, json.dumps(generic, indent=2))


def _claude_add(server: dict[str, object]) -> str:
    # `claude mcp add-json <name> <json>` takes the server entry itself, not an mcpServers map.
    return f"claude mcp add-json zodex {shlex.quote(json.dumps(server, separators=(',', ':')))}"


_CLAUDE_WHERE = "# Run this in a shell (it adds zodex to Claude Code; add --scope user for every project):"
_CODEX_WHERE = "# Add this to ~/.codex/config.toml:"
_CURSOR_WHERE = "# Merge this into ~/.cursor/mcp.json (every project) or .cursor/mcp.json (this project):"
_JSON_WHERE = "# The server entry, for any other client:"
