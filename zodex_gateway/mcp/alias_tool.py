"""``set_agent_alias`` (docs/tools.md#set_agent_alias): Local's one tool the gateway answers
itself. It labels the calling agent for viewers and is never recorded as a call."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from zodex_gateway.agents.alias import clean_alias
from zodex_gateway.history import AgentRecord, HistoryUnavailable
from zodex_gateway.mcp.call_recorder import CallRecorder
from zodex_gateway.mcp.calls import error_result, text_result
from zodex_protocol.errors import ProtocolError

# Without an identity: how to get one.
NO_IDENTITY = (
    "set_agent_alias needs to know which conversation is calling, and this call carries no agent "
    "identity (no openai/session metadata and no MCP session); nothing was changed. To get one, "
    "connect through the stdio bridge `zodex local connect`, or over HTTP send initialize and then "
    "the Mcp-Session-Id header it answers with on every call"
)


def set_agent_alias(
    recorder: CallRecorder, agent: AgentRecord | None, args: dict[str, Any]
) -> types.CallToolResult:
    """``agent``: the caller, None without history or identity."""
    if agent is None:
        return error_result(NO_IDENTITY)
    try:
        alias = clean_alias(args.get("alias"))
    except ProtocolError as exc:
        return error_result(exc.message)
    try:
        updated = recorder.label(agent, alias)
    except HistoryUnavailable as exc:
        return error_result(str(exc))
    data = {"agent_id": updated.agent_id, "alias": updated.alias or ""}
    line = (
        f"Agent {updated.agent_id} is now labelled {updated.alias!r}."
        if updated.alias
        else f"Agent {updated.agent_id} has no label now."
    )
    return text_result(line, data)
