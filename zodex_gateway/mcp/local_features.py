"""What Local mode adds around the tools — agents and history, model context, viewers — as
the tool dispatcher is given it (opened by :mod:`zodex_gateway.serve.features`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from zodex_gateway.context import ContextProvider
from zodex_gateway.history import AgentRecord, HistoryStore
from zodex_gateway.redaction import SECRETS, SecretRegistry


class CallWatcher(Protocol):
    """Hears about recorded calls and agents (the observer's event feed)."""

    def agent_seen(self, agent: AgentRecord) -> None: ...

    def agent_updated(self, agent: AgentRecord) -> None: ...

    def call_started(self, invocation_id: str) -> None: ...

    def call_completed(self, invocation_id: str) -> None: ...


@dataclass
class LocalFeatures:
    history: HistoryStore | None = None
    context: ContextProvider | None = None
    stdio_connection: str | None = None  # the identity of a stdio gateway's one connection
    watchers: list[CallWatcher] = field(default_factory=list)
    # Redacted from what history stores; the model's results are not (docs/security.md#redaction).
    secrets: SecretRegistry = SECRETS
