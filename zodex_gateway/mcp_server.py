"""The MCP server: tool listing and tool calls, turned into results a model can act on.

Errors never escape as exceptions (the SDK would hide them behind a generic message):
every refusal becomes a tool result with ``isError`` and one clear line.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from zodex_gateway import tools
from zodex_gateway.dispatcher import Dispatcher
from zodex_protocol.errors import ProtocolError

log = logging.getLogger("zodex.gateway")

SERVER_NAME = "zodex"


def instructions(start_directory: str | None) -> str:
    lines = ["Zodex gives you a real machine: run commands with exec_command, continue them with "
             "write_stdin, and edit files with apply_patch."]  # fmt: skip
    if start_directory:
        lines.append(f"Suggested first workdir: {start_directory}")
    lines.append(
        "Every exec_command and apply_patch call must still give workdir as an absolute path of an "
        "existing directory; none is ever substituted or defaulted."
    )
    return "\n".join(lines)


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(text=text)]


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=_text(message), is_error=True)


def session_result(result: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=_text(json.dumps(result, ensure_ascii=False)), structured_content=result
    )


def patch_result(body: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=_text(str(body["text"])), is_error=not body["ok"])


class ToolHandlers:
    def __init__(self, dispatcher: Dispatcher, *, read_only_hint: bool = True) -> None:
        self.dispatcher = dispatcher
        self._tools = tools.tool_list(read_only_hint=read_only_hint)

    async def list_tools(
        self, _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tools)

    async def call_tool(
        self, _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = params.arguments or {}
        try:
            if params.name == tools.EXEC_COMMAND:
                return session_result(await self.dispatcher.exec_command(args))
            if params.name == tools.WRITE_STDIN:
                return session_result(await self.dispatcher.write_stdin(args))
            if params.name == tools.APPLY_PATCH:
                return patch_result(await self.dispatcher.apply_patch(args))
            return error_result(f"Unknown tool: {params.name}")
        except ProtocolError as exc:
            if not exc.is_tool_level:
                log.warning("%s failed at the protocol level: %r", params.name, exc)
            return error_result(exc.message)
        except TimeoutError:
            return error_result(f"{params.name} got no answer from its worker in time; try again")


def build_server(
    dispatcher: Dispatcher, *, start_directory: str | None = None, read_only_hint: bool = True
) -> Server[Any]:
    handlers = ToolHandlers(dispatcher, read_only_hint=read_only_hint)
    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=instructions(start_directory),
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zodex")
    except PackageNotFoundError:
        return "0"
