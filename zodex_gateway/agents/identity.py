"""Who is calling (docs/agents.md#identity): the conversation behind a tool call, as an identity key.

In order: ``_meta["openai/session"]`` (ChatGPT sends it on every call); else the MCP
transport session — over HTTP an ``Mcp-Session-Id`` the gateway issued and verified
(:mod:`zodex_gateway.agents.session_ids`), or the stdio connection (one per gateway
process); else nobody (the call is unattributed).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

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


# Identities a gateway remembers the agent of; an older one is looked up in history again.
AGENTS_KEPT: Final = 1024


class KnownAgents(Generic[T]):
    """The agents of the identities met lately, least recently used dropped first. Kept
    under a hash of the key: a key holds the client's whole ``openai/session`` value, which
    may be as long as a request allows, and a gateway meets new ones for as long as it runs."""

    def __init__(self, kept: int = AGENTS_KEPT) -> None:
        self._kept = kept
        self._agents: OrderedDict[bytes, T] = OrderedDict()

    def get(self, key: str) -> T | None:
        digest = _digest(key)
        agent = self._agents.get(digest)
        if agent is not None:
            self._agents.move_to_end(digest)
        return agent

    def put(self, key: str, agent: T) -> None:
        digest = _digest(key)
        self._agents[digest] = agent
        self._agents.move_to_end(digest)
        while len(self._agents) > self._kept:
            self._agents.popitem(last=False)

    def __len__(self) -> int:
        return len(self._agents)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
