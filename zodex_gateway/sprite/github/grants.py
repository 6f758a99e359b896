"""How push grants read to the agent and the operator (docs/github.md#request-push-list-grants-revoke-push): one
line each, never the token."""

from __future__ import annotations

import time
from typing import Any

from .state import Grant

__all__ = ["grant_lines", "grant_records", "when"]


def when(epoch: object) -> str:
    if epoch is None:
        return "none"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(epoch)))  # type: ignore[arg-type]


def grant_records(grants: list[Grant], now: float) -> list[dict[str, Any]]:
    """What may be shown of each grant: everything but the token."""
    return [
        {
            "repo": g.repo,
            "state": "active" if g.live(now) else "expired",
            "expires_at": g.expires_at,
            "source": g.source,
        }
        for g in grants
    ]


def grant_lines(grants: list[dict[str, Any]], requests: list[dict[str, Any]]) -> list[str]:
    lines = [f"grants: {sum(1 for g in grants if g['state'] == 'active')}"]
    for grant in grants:
        lines.append(
            f"grant: {grant['repo']} state={grant['state']} expires-at={when(grant['expires_at'])} source={grant['source']}"
        )
    for request in requests:
        extra = f" error={request['error']}" if request.get("error") else ""
        lines.append(
            f"request: {request['repo']} state={request['state']} user-code={request['user_code']}{extra}"
        )
    return lines
