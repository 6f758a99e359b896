"""Who is calling (docs/agents.md#identity): the conversation behind a tool call, as an identity key.

In order: ``_meta["openai/session"]`` (ChatGPT sends it on every call); else the MCP
transport session — over HTTP an ``Mcp-Session-Id`` the gateway issued and verified
(:mod:`zodex_gateway.agents.session_ids`), or the stdio connection (one per gateway
process); else nobody (the call is unattributed).
"""

from __future__ import annotations

from typing import Any, Final

OPENAI_SESSION_META: Final = "openai/session"
# Set in an HTTP request's ASGI scope by the MCP listener once the request's Mcp-Session-Id
# is verified. A client writes headers, never the scope: the raw header is not an identity.
VERIFIED_SESSION_SCOPE_KEY: Final = "zodex.verified_mcp_session_id"


def identity_key(meta: Any, request: Any, stdio_connection: str | None) -> str | None:
    """``request``: the HTTP request (None over stdio)."""
    if isinstance(meta, dict):
        session = meta.get(OPENAI_SESSION_META)
        if isinstance(session, str) and session:
            return f"openai-session:{session}"
    if request is not None:
        scope = getattr(request, "scope", None)
        verified = scope.get(VERIFIED_SESSION_SCOPE_KEY) if isinstance(scope, dict) else None
        return f"mcp-session:{verified}" if isinstance(verified, str) and verified else None
    if stdio_connection is not None:
        return f"stdio:{stdio_connection}"
    return None
