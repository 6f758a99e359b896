"""Model context on a tool result (docs/agents.md#model-context): the context files and
skills an agent has not seen yet for the workdir it works in, added to what the model gets
and never to what history records."""

from __future__ import annotations

import json

import mcp_types as types

from zodex_gateway.context import ContextProvider, attach
from zodex_gateway.history import AgentRecord
from zodex_gateway.mcp.calls import text_of, text_result


class ContextAttacher:
    def __init__(self, provider: ContextProvider | None) -> None:
        """``provider``: None where the gateway gives no model context (Sprite, the fleet)."""
        self._provider = provider

    def attached(
        self, result: types.CallToolResult, agent: AgentRecord | None, real_workdir: str | None, ok: bool
    ) -> types.CallToolResult:
        """``result`` with the context due to ``agent`` after a call in ``real_workdir``
        (the workdir's real path; its files are due only after a call that succeeded)."""
        if self._provider is None or agent is None:
            return result
        context = self._provider.for_call(agent.agent_id, real_workdir if ok else None, success=ok)
        if context is None:
            return result
        text = text_of(result)
        if isinstance(result.structured_content, dict) and not result.is_error:
            structured = {**result.structured_content, "zodex_context": context.data}
            # A result whose text mirrors its structure keeps mirroring it.
            if text == json.dumps(result.structured_content, ensure_ascii=False):
                return text_result(json.dumps(structured, ensure_ascii=False), structured)
            return text_result(attach(text, context), structured)
        return types.CallToolResult(
            content=[types.TextContent(text=attach(text, context))],
            structured_content=result.structured_content,
            is_error=result.is_error,
        )
