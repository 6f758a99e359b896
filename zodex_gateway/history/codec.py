"""Values to and from the TEXT columns, exactly."""

from __future__ import annotations

import json
from typing import Any


def dump_json(value: Any) -> str:
    """JSON that reads back to an equal value and is valid UTF-8 for SQLite."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (from a JSON "\ud800" escape) has no UTF-8 form; escaping
        # keeps it exactly, at the cost of readability for this one value.
        return json.dumps(value, ensure_ascii=True)
    return text


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def utf8_size(text: str | None) -> int:
    return 0 if text is None else len(text.encode("utf-8", "surrogatepass"))


def storable_text(text: str) -> tuple[str, int]:
    """Output text and its UTF-8 size. Lone surrogates become U+FFFD: the raw stream is
    already decoded text, and SQLite cannot hold what UTF-8 cannot say."""
    try:
        return text, len(text.encode("utf-8"))
    except UnicodeEncodeError:
        clean = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return clean, len(clean.encode("utf-8"))
