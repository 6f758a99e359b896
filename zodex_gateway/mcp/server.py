"""The MCP server: the SDK's low-level server around a gateway's tool dispatcher, with the
name, version and instructions of its mode (docs/modes.md#transports)."""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel import Server

from zodex_gateway.config.package_version import zodex_version
from zodex_gateway.mcp.instructions import SERVER_NAME
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher


def server_for(tools: ToolDispatcher, *, start_directory: str | None = None) -> Server[Any]:
    """The SDK's server around ``tools``: listing, calls and the instructions of its mode."""
    return Server(
        SERVER_NAME,
        version=zodex_version(),
        instructions=tools.mode.instructions(start_directory),
        get_tool_input_schema=tools.input_schema,
        on_list_tools=tools.list_tools,
        on_call_tool=tools.call_tool,
    )
