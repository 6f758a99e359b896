"""``zodex local mcp-config``: what a person pastes into an MCP client to connect, in the
exact shape that client's own configuration takes (docs/modes.md#client-entries).

By default the entry starts ``zodex local connect``, which finds the running runtime on
every call and so survives restarts, and whose configuration holds no token. With
``--http`` it is the running runtime's URL and token header instead, under its own name
(``zodex-http``) so that a client can hold both entries.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.config.operator_command import zodex_path
from zodex_gateway.local.discovery import Discovery

CLIENTS = ("claude", "codex", "cursor", "json")
CONNECT_ARGS = ["local", "connect"]
STDIO_NAME = "zodex"
HTTP_NAME = "zodex-http"
TOKEN_HEADER = "X-Zodex-Local-Token"


@dataclass(frozen=True)
class Snippet:
    where: str  # one line saying where the text goes, printed apart from it
    text: str  # exactly what to paste


# Where the bridge looks for the runtime and its configuration. Clients start servers with
# only a few variables of their own (Codex and MCP's TypeScript SDK pass HOME, PATH and the
# like; an app started from a desktop never saw the shell's), so values set here go in the
# entry, or the bridge would look in the default directories and find no runtime.
LOCATION_VARIABLES = ("XDG_STATE_HOME", "XDG_CONFIG_HOME")


def location_env() -> dict[str, str]:
    """The location variables set (to an absolute path, the only kind XDG honours) now."""
    found = {name: os.environ.get(name, "") for name in LOCATION_VARIABLES}
    return {name: value for name, value in found.items() if os.path.isabs(value)}


def connect_snippet(client: str) -> Snippet:
    """The stdio entry that starts ``<zodex> local connect``, with ``env`` when
    :func:`location_env` finds any."""
    command = zodex_path()
    env = location_env()
    server: dict[str, object] = {"command": command, "args": CONNECT_ARGS}
    if env:
        server["env"] = env
    if client == "claude":
        return Snippet(_CLAUDE_WHERE, _claude_add(STDIO_NAME, {"type": "stdio", **server}))
    if client == "codex":
        lines = [
            f"[mcp_servers.{STDIO_NAME}]",
            f"command = {_toml(command)}",
            f"args = {json.dumps(CONNECT_ARGS)}",
        ]
        if env:
            pairs = ", ".join(f"{name} = {_toml(value)}" for name, value in env.items())
            lines.append(f"env = {{ {pairs} }}")
        return Snippet(_CODEX_WHERE, "\n".join(lines))
    if client == "cursor":
        return Snippet(_CURSOR_WHERE, json.dumps({"mcpServers": {STDIO_NAME: server}}, indent=2))
    generic = {"transport": "stdio", **server}
    return Snippet(_JSON_WHERE, json.dumps(generic, indent=2))


def _toml(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but ``\\ud83d``-style surrogate pairs
    are not, so characters outside ASCII stay as they are (TOML files are UTF-8)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def http_snippet(client: str, running: Discovery) -> Snippet:
    """The running runtime's URL and token header: good until its token changes (at
    ``setup --rotate-token``, or every start with ``mcp.token = per-start``) or its port does.
    ``"type": "http"`` is in every JSON shape: clients that read ``mcpServers`` files
    (Inspector's ``--config``) take an entry without it for a command to start."""
    url = running.mcp["url"]
    token = Path(running.mcp["token_path"]).read_text().strip()
    server: dict[str, object] = {"type": "http", "url": url, "headers": {TOKEN_HEADER: token}}
    if client == "claude":
        return Snippet(_CLAUDE_WHERE, _claude_add(HTTP_NAME, server))
    if client == "codex":
        lines = [
            f"[mcp_servers.{HTTP_NAME}]",
            f"url = {_toml(url)}",
            f"http_headers = {{ {TOKEN_HEADER} = {_toml(token)} }}",
        ]
        return Snippet(_CODEX_WHERE, "\n".join(lines))
    if client == "cursor":
        return Snippet(_CURSOR_WHERE, json.dumps({"mcpServers": {HTTP_NAME: server}}, indent=2))
    generic = {"transport": "streamable-http", **server}
    return Snippet(_JSON_WHERE, json.dumps(generic, indent=2))


def _claude_add(name: str, server: dict[str, object]) -> str:
    # `claude mcp add-json <name> <json>` takes the server entry itself, not an mcpServers map.
    return f"claude mcp add-json {name} {shlex.quote(json.dumps(server, separators=(',', ':')))}"


_CLAUDE_WHERE = "# Run this in a shell (it adds zodex to Claude Code; add --scope user for every project):"
_CODEX_WHERE = "# Add this to ~/.codex/config.toml:"
_CURSOR_WHERE = "# Merge this into ~/.cursor/mcp.json (every project) or .cursor/mcp.json (this project):"
_JSON_WHERE = "# The server entry, for any other client:"
