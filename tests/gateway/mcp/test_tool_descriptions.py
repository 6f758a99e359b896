"""Tool descriptions state the effective limits: today's exact text with the defaults, the
configured numbers otherwise (docs/tools.md, docs/config.md#keys)."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from zodex_gateway.mcp import tools
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_protocol.limits import Limits

DEFAULT_EXEC_YIELD = (
    "How long to wait before returning a session handle if the command is still running (ms). "
    "Default 10000, clamped to 50..30000. Returns at once when it ends."
)
DEFAULT_TIMEOUT = (
    "Wall-clock limit for the whole command (ms), enforced even if nobody polls. "
    "Default 7200000, clamped to 1000..7200000."
)
DEFAULT_WRITE_YIELD = (
    "How long to wait for more output or exit (ms). Default 10000, clamped to 50..30000. "
    "Returns early once new output has been quiet for 250 ms."
)

CHANGED = Limits(
    exec_yield_ms=2_000,
    write_yield_ms=3_000,
    yield_min_ms=20,
    yield_max_ms=90_000,
    poll_settle_ms=400,
    timeout_ms=600_000,
    timeout_min_ms=5_000,
    timeout_max_ms=900_000,
)


def descriptions(listed: list[types.Tool]) -> dict[str, str]:
    by_name = {tool.name: tool.input_schema["properties"] for tool in listed}
    return {
        "exec yield": by_name[tools.EXEC_COMMAND]["yield_time_ms"]["description"],
        "timeout": by_name[tools.EXEC_COMMAND]["timeout_ms"]["description"],
        "write yield": by_name[tools.WRITE_STDIN]["yield_time_ms"]["description"],
    }


def dumped(listed: list[types.Tool]) -> list[dict[str, Any]]:
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed]


def test_default_limits_give_todays_exact_text() -> None:
    assert descriptions(tools.tool_list(Limits())) == {
        "exec yield": DEFAULT_EXEC_YIELD,
        "timeout": DEFAULT_TIMEOUT,
        "write yield": DEFAULT_WRITE_YIELD,
    }


def test_changed_limits_give_the_changed_numbers() -> None:
    assert descriptions(tools.tool_list(CHANGED)) == {
        "exec yield": "How long to wait before returning a session handle if the command is still running "
        "(ms). Default 2000, clamped to 20..90000. Returns at once when it ends.",
        "timeout": "Wall-clock limit for the whole command (ms), enforced even if nobody polls. "
        "Default 600000, clamped to 5000..900000.",
        "write yield": "How long to wait for more output or exit (ms). Default 3000, clamped to 20..90000. "
        "Returns early once new output has been quiet for 400 ms.",
    }


def test_only_those_numbers_change() -> None:
    default, changed = dumped(tools.tool_list(Limits())), dumped(tools.tool_list(CHANGED))
    for before, after in zip(default, changed, strict=True):
        for name in ("yield_time_ms", "timeout_ms"):
            before["inputSchema"]["properties"].pop(name, None)
            after["inputSchema"]["properties"].pop(name, None)
    assert default == changed
    # Limits that no description names leave the list as it is.
    assert dumped(tools.tool_list(Limits(kill_grace_ms=1_000, max_cmd_chars=10))) == dumped(
        tools.tool_list(Limits())
    )


async def test_the_server_lists_the_limits_it_was_given() -> None:
    handlers = ToolDispatcher(object(), limits=CHANGED)  # type: ignore[arg-type]
    listed = (await handlers.list_tools(None, None)).tools
    assert descriptions(listed) == descriptions(tools.tool_list(CHANGED))
    plain = (await ToolDispatcher(object()).list_tools(None, None)).tools  # type: ignore[arg-type]
    assert descriptions(plain)["exec yield"] == DEFAULT_EXEC_YIELD


async def test_the_sdk_finds_each_listed_input_schema_without_listing_tools() -> None:
    # Over HTTP the SDK checks Mcp-Param-* headers against the called tool's input schema;
    # the lookup it is given answers exactly what tools/list lists.
    from zodex_gateway.mcp.server import server_for

    handlers = ToolDispatcher(object(), limits=CHANGED)  # type: ignore[arg-type]
    listed = (await handlers.list_tools(None, None)).tools
    assert {t.name: handlers.input_schema(t.name) for t in listed} == {t.name: t.input_schema for t in listed}
    assert handlers.input_schema("no_such_tool") is None
    lookup = server_for(ToolDispatcher(object(), limits=CHANGED)).get_tool_input_schema  # type: ignore[arg-type]
    assert lookup is not None
    assert lookup(tools.EXEC_COMMAND) == handlers.input_schema(tools.EXEC_COMMAND)
