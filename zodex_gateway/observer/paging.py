"""Query parameters the observer routes share: limits, opaque cursors, and the API error."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 100

T = TypeVar("T")


class ApiError(Exception):
    """A request the API answers with ``{"schema_version": 1, "error": message}``."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def query_int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer from {low} to {high}, got {raw!r}") from None
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be an integer from {low} to {high}, got {value}")
    return value


def parse_choice(params: Mapping[str, str], name: str, choices: Sequence[str]) -> str:
    value = params.get(name) or choices[0]
    if value not in choices:
        raise ApiError(400, f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def encode_cursor(payload: dict[str, Any]) -> str:
    data = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def decode_cursor(raw: str, keys: Mapping[str, type]) -> dict[str, Any]:
    """The payload of a cursor this API made, with exactly ``keys`` of those types; else 400."""
    try:
        data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        payload = json.loads(data)
    except (binascii.Error, ValueError):
        raise ApiError(400, "cursor is not valid; pass back a next_cursor this API returned") from None
    if not isinstance(payload, dict) or set(payload) != set(keys):
        raise ApiError(400, "cursor is not valid; pass back a next_cursor this API returned")
    for key, kind in keys.items():
        value = payload[key]
        # JSON has one number type: a float field accepts an int, never a bool.
        ok = isinstance(value, int | float) if kind is float else isinstance(value, kind)
        if not ok or isinstance(value, bool):
            raise ApiError(400, "cursor is not valid; pass back a next_cursor this API returned")
    return payload


def position_cursor(started_at: float, item_id: str) -> str:
    return encode_cursor({"t": started_at, "id": item_id})


def position(raw_cursor: str | None) -> tuple[float, str] | None:
    """The ``(started_at, id)`` a position cursor names: page on from just after it."""
    if not raw_cursor:
        return None
    payload = decode_cursor(raw_cursor, {"t": float, "id": str})
    return float(payload["t"]), str(payload["id"])


def page_after(
    items: Sequence[T], key: Any, raw_cursor: str | None, limit: int
) -> tuple[list[T], str | None]:
    """One page of ``items`` (newest first, ``key(item)`` = ``(started_at, id)``) after the
    cursor. A cursor whose item was since deleted (retention) resumes at the next older one."""
    start = 0
    if raw_cursor:
        payload = decode_cursor(raw_cursor, {"t": float, "id": str})
        mark = (float(payload["t"]), str(payload["id"]))
        start = len(items)
        for index, item in enumerate(items):
            if key(item) < mark:
                start = index
                break
    page = list(items[start : start + limit])
    more = start + limit < len(items)
    next_cursor = position_cursor(*key(page[-1])) if more and page else None
    return page, next_cursor
