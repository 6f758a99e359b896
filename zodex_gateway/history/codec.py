"""Values to and from the TEXT columns, exactly."""

from __future__ import annotations

import json
from typing import Any

# Made once: json.dumps builds a new encoder for every call given any option.
_encode_utf8 = json.JSONEncoder(ensure_ascii=False).encode
_encode_ascii = json.JSONEncoder(ensure_ascii=True).encode


def dump_json(value: Any) -> tuple[str, int]:
    """JSON that reads back to an equal value and is valid UTF-8 for SQLite, and its
    UTF-8 size."""
    text = _encode_utf8(value)
    if text.isascii():
        return text, len(text)
    try:
        return text, len(text.encode("utf-8"))
    except UnicodeEncodeError:
        # A lone surrogate (from a JSON "\ud800" escape) has no UTF-8 form; escaping
        # keeps it exactly, at the cost of readability for this one value.
        text = _encode_ascii(value)
        return text, len(text)


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def utf8_size(text: str | None) -> int:
    if text is None:
        return 0
    # isascii() reads a flag of the string: no encoding for the common case.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def storable_text(text: str) -> tuple[str, int]:
    """Output text and its UTF-8 size. Lone surrogates become U+FFFD: the raw stream is
    already decoded text, and SQLite cannot hold what UTF-8 cannot say."""
    try:
        return text, len(text.encode("utf-8"))
    except UnicodeEncodeError:
        clean = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return clean, len(clean.encode("utf-8"))
