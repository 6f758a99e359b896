"""What the MCP layer's tool call tests share: a 2026-07-28 envelope, a dispatcher that
raises, and answers compared without their measured times."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp_types.version import LATEST_MODERN_VERSION

from tests.support.in_process import InProcessDispatcher

ENVELOPE = {
    types.PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION,
    types.CLIENT_CAPABILITIES_META_KEY: {},
    types.CLIENT_INFO_META_KEY: {"name": "test", "version": "0"},
}


class FailingDispatcher(InProcessDispatcher):
    async def exec_command(self, args: Any, **_given: Any) -> Any:
        raise RuntimeError("the dispatcher broke")


def without_timing(answer: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC answer with the command's measured wall time left out (it differs run to
    run), from the structured result and from the text block holding the same JSON."""
    result = answer.get("result")
    if isinstance(result, dict) and isinstance(result.get("structuredContent"), dict):
        result["structuredContent"].pop("wall_time_ms", None)
        text = json.loads(result["content"][0]["text"])
        text.pop("wall_time_ms", None)
        result["content"][0]["text"] = text
    return answer
