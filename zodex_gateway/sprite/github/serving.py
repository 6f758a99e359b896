"""What every handler of the publisher shares: the refusal the agent sees, a string field of
a request, the log line."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["Refusal", "log", "text_field"]


class Refusal(Exception):
    """The one line the agent sees."""


def text_field(request: dict[str, Any], name: str, default: str | None = None) -> str:
    value = request.get(name, default)
    if not isinstance(value, str):
        raise Refusal(f"{name} must be a string")
    return value


def log(message: str) -> None:
    print(f"zodex-publisher: {message}", file=sys.stderr, flush=True)
