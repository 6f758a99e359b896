"""Who is calling (docs/agents.md#identity): the conversation behind a tool call, as an identity key.

In order: ``_meta["openai/session"]`` (ChatGPT sends it on every call); else the MCP
transport session — the ``Mcp-Session-Id`` header over HTTP, or the stdio connection
(one per gateway process); else nobody (the call is unattributed).
"""

from __future__ import annotations

from typing import Any

OPENAI_SESSION_META = "openai/session"


def identity_key(meta: Any, request: Any, stdio_connection: str | None) -> str | None:
    if isinstance(meta, dict):
        session = meta.get(OPENAI_SESSION_META)
        if isinstance(session, str) and session:
            return f"openai-session:{session}"
    headers = getattr(request, "headers", None)
    if headers is not None:
        transport_session = headers.get("mcp-session-id")
        if transport_session:
            return f"mcp-session:{transport_session}"
        return None
    if stdio_connection is not None:
        return f"stdio:{stdio_connection}"
    return None
