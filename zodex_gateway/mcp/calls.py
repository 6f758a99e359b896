"""One tool call as the gateway's handlers see it, and the results they give back.

A refusal is never an exception (the SDK would hide it behind a generic message): it is a
result with ``isError`` and one clear line (docs/tools.md#errors).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from zodex_gateway.history import FileChange
from zodex_protocol.replies import Patched
from zodex_protocol.validation import CheckedWorkdir


@dataclass(frozen=True)
class ToolCall:
    """A call on its way to its handler. ``invocation``: its id in history (None when not
    recorded); ``ctx``: the SDK's context of the request (None when called without the SDK),
    through which a handler can reach the requesting client while the call runs;
    ``workdir``: its ``workdir`` argument's check, made once for history and the request
    (None when the argument is not a string)."""

    name: str
    args: dict[str, Any]
    invocation: str | None = None
    ctx: ServerRequestContext[Any] | None = None
    workdir: CheckedWorkdir | None = None


# A cancelled call's error in history and the call log (docs/history.md#recording).
CANCELLED = "cancelled by the client while it waited; the command goes on"


@dataclass
class Outcome:
    """One dispatched call: what the model gets, and what history records (no context)."""

    result: types.CallToolResult
    recorded: Any
    created_handle: str | None = None
    files: tuple[FileChange, ...] = ()


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(text=text)]


def text_result(text: str, structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=_text(text), structured_content=structured)


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=_text(message), is_error=True)


def session_result(result: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=_text(json.dumps(result, ensure_ascii=False)), structured_content=result
    )


def patch_result(patched: Patched) -> types.CallToolResult:
    return types.CallToolResult(content=_text(patched.text), is_error=not patched.ok)


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0] if result.content else None
    return block.text if isinstance(block, types.TextContent) else ""
