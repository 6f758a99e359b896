"""``set_agent_alias`` (docs/tools.md#set_agent_alias): the rules for a conversation's display label.

A label is shown to a person, so everything in it must be visible and mean what it shows:
no invisible or layout characters (format, line and paragraph separators, private use,
unassigned), which could hide text or make the label display as something else, and not
only blank-looking fillers. Emoji stay usable: a zero-width joiner between two emoji
(👩‍💻) and the tag characters of a subdivision flag (🏴󠁧󠁢󠁳󠁣󠁴󠁿) are part of the picture
(docs/agents.md#aliases).
"""

from __future__ import annotations

import re
import unicodedata

from zodex_protocol.errors import ErrorCode, ProtocolError

MAX_ALIAS_CHARS = 80

# Categories that never display as themselves: format (Cf, e.g. U+200B, U+FEFF, U+00AD,
# bidi controls, tag characters), line and paragraph separators, private use, unassigned.
_REFUSED_CATEGORIES = frozenset({"Cf", "Zl", "Zp", "Co", "Cn"})

ZWJ = "\u200d"
BLACK_FLAG = "\U0001f3f4"  # the base of every subdivision flag
CANCEL_TAG = "\U000e007f"
_TAG_FIRST, _TAG_LAST = 0xE0020, 0xE007E
# A subdivision code (UTS #51 tag_spec as used by flags): a region of two letters, then one
# to four letters or digits ("gbsct"). Anything longer could carry hidden text.
_SUBDIVISION = re.compile(r"[a-z]{2}[a-z0-9]{1,4}")
# Emoji presentation selector and skin tones: may sit between an emoji and a joiner.
_EMOJI_MODIFIERS = frozenset({"\ufe0f", *map(chr, range(0x1F3FB, 0x1F400))})

# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties), which Python does not expose.
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)  # fmt: skip
# Letters that render as nothing (Hangul fillers) and the blank Braille pattern.
_BLANK_LETTERS = frozenset({"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800"})


def clean_alias(value: object) -> str | None:
    """The alias to store (None clears it), or a ProtocolError naming what is wrong."""
    if not isinstance(value, str):
        raise _invalid("alias must be a string")
    alias = value.strip()
    if any(unicodedata.category(ch) == "Cc" for ch in alias):
        raise _invalid("alias must not contain control characters (use plain words)")
    hidden = _first_hidden(alias)
    if hidden is not None:
        raise _invalid(f"alias must not contain {describe(hidden)}")
    if len(alias) > MAX_ALIAS_CHARS:
        raise _invalid(
            f"alias is too long ({len(alias)} characters; at most {MAX_ALIAS_CHARS}): use a 2-7 word label"
        )
    if alias and all(_blank_looking(ch) for ch in alias):
        raise _invalid("alias must contain a visible character")
    return alias or None


def describe(ch: str) -> str:
    """``U+200B (ZERO WIDTH SPACE)``; characters without a name say what they are."""
    category = unicodedata.category(ch)
    name = unicodedata.name(ch, "")
    if not name:
        name = {"Co": "private use", "Cn": "unassigned", "Cs": "surrogate"}.get(category, category)
    return f"U+{ord(ch):04X} ({name})"


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_ARGUMENT, message)


def _first_hidden(alias: str) -> str | None:
    """The first character that would not display as itself, outside emoji sequences."""
    i = 0
    while i < len(alias):
        ch = alias[i]
        if ch == BLACK_FLAG:
            i += 1 + _flag_tags(alias, i + 1)
            continue
        if unicodedata.category(ch) in _REFUSED_CATEGORIES and not (ch == ZWJ and _joins_emoji(alias, i)):
            return ch
        i += 1
    return None


def _flag_tags(alias: str, start: int) -> int:
    """How many characters after a black flag form its subdivision tag (0 if none)."""
    end = start
    while end < len(alias) and _TAG_FIRST <= ord(alias[end]) <= _TAG_LAST:
        end += 1
    if end >= len(alias) or alias[end] != CANCEL_TAG:
        return 0  # no terminated tag sequence: any tag character here is refused
    code = "".join(chr(ord(ch) - 0xE0000) for ch in alias[start:end])
    return end + 1 - start if _SUBDIVISION.fullmatch(code) else 0


def _joins_emoji(alias: str, i: int) -> bool:
    """A zero-width joiner between two emoji (👩‍💻): skin tones and U+FE0F may precede it."""
    before = i - 1
    while before >= 0 and alias[before] in _EMOJI_MODIFIERS:
        before -= 1
    after = i + 1
    return before >= 0 and after < len(alias) and _is_emoji(alias[before]) and _is_emoji(alias[after])


def _is_emoji(ch: str) -> bool:
    # Emoji are "other symbols"; Python has no Extended_Pictographic property.
    return unicodedata.category(ch) == "So" and ch not in _BLANK_LETTERS


def _blank_looking(ch: str) -> bool:
    category = unicodedata.category(ch)
    code = ord(ch)
    return (
        category[0] == "Z"
        or category in ("Cf", "Mn")
        or ch in _BLANK_LETTERS
        or any(low <= code <= high for low, high in _DEFAULT_IGNORABLE)
    )
