"""``set_agent_alias`` (docs/tools.md#set_agent_alias): the rules for a conversation's display label."""

from __future__ import annotations

import unicodedata

from zodex_protocol.errors import ErrorCode, ProtocolError

MAX_ALIAS_CHARS = 80
# Bidi overrides can make a label display as something else; zero-width joiners (emoji) are fine.
_BIDI = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}


def clean_alias(value: object) -> str | None:
    """The alias to store (None clears it), or a ProtocolError naming what is wrong."""
    if not isinstance(value, str):
        raise ProtocolError(ErrorCode.INVALID_ARGUMENT, "alias must be a string")
    alias = value.strip()
    if any(unicodedata.category(ch) == "Cc" or ch in _BIDI for ch in alias):
        raise ProtocolError(
            ErrorCode.INVALID_ARGUMENT, "alias must not contain control characters (use plain words)"
        )
    if len(alias) > MAX_ALIAS_CHARS:
        raise ProtocolError(
            ErrorCode.INVALID_ARGUMENT,
            f"alias is too long ({len(alias)} characters; at most {MAX_ALIAS_CHARS}): use a 2-7 word label",
        )
    return alias or None
