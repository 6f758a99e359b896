"""Aliases are shown to a person: invisible and layout characters are refused, emoji
sequences are not (docs/agents.md#aliases)."""

from __future__ import annotations

import pytest

from zodex_gateway.agents.alias import clean_alias
from zodex_protocol.errors import ProtocolError

SUBDIVISION_FLAG = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"  # Scotland
TAG_HELLO = "".join(chr(0xE0000 + ord(c)) for c in "hello")


def refused(alias: str) -> str:
    with pytest.raises(ProtocolError) as caught:
        clean_alias(alias)
    return caught.value.message


@pytest.mark.parametrize(
    ("alias", "message"),
    [
        ("zero\u200bwidth", "alias must not contain U+200B (ZERO WIDTH SPACE)"),
        ("\ufeffbom label", "alias must not contain U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
        ("soft\u00adhyphen", "alias must not contain U+00AD (SOFT HYPHEN)"),
        ("evil\u202eabc", "alias must not contain U+202E (RIGHT-TO-LEFT OVERRIDE)"),
        ("word\u2060joiner", "alias must not contain U+2060 (WORD JOINER)"),
        ("line\u2028sep", "alias must not contain U+2028 (LINE SEPARATOR)"),
        ("para\u2029sep", "alias must not contain U+2029 (PARAGRAPH SEPARATOR)"),
        ("private \ue000 use", "alias must not contain U+E000 (private use)"),
        ("plane 15 \U000f0000", "alias must not contain U+F0000 (private use)"),
        ("unassigned \u0378", "alias must not contain U+0378 (unassigned)"),
        ("nonchar \uffff", "alias must not contain U+FFFF (unassigned)"),
    ],
)
def test_invisible_and_layout_characters_are_named(alias: str, message: str) -> None:
    assert refused(alias) == message


def test_tag_characters_outside_a_flag_carry_hidden_text_and_are_refused() -> None:
    assert refused(f"Docs pass{TAG_HELLO}") == "alias must not contain U+E0068 (TAG LATIN SMALL LETTER H)"
    # A flag whose tag run is not a subdivision code (two letters, then one to four letters
    # or digits), or is never cancelled.
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "run rm -rf")
    assert refused(f"\U0001f3f4{hidden}\U000e007f").startswith("alias must not contain U+E0072")
    assert refused(f"\U0001f3f4{TAG_HELLO}").startswith("alias must not contain U+E0068")
    assert refused("\U0001f3f4\U000e0067\U000e0062\U000e0073").startswith("alias must not contain U+E0067")
    assert refused("flag \U000e007f") == "alias must not contain U+E007F (CANCEL TAG)"


def test_a_joiner_outside_an_emoji_sequence_is_refused() -> None:
    assert refused("Rindle\u200dwork") == "alias must not contain U+200D (ZERO WIDTH JOINER)"
    assert refused("\U0001f469\u200d") == "alias must not contain U+200D (ZERO WIDTH JOINER)"
    assert refused("\u200d\U0001f4bb") == "alias must not contain U+200D (ZERO WIDTH JOINER)"


@pytest.mark.parametrize(
    "alias",
    [
        "Rindle implementation",
        "\U0001f469\u200d\U0001f4bb coder",  # woman technologist
        "\U0001f468\U0001f3fd\u200d\U0001f527 fixer",  # mechanic with a skin tone
        "\U0001f3f3\ufe0f\u200d\U0001f308 parade",  # rainbow flag: VS16 before the joiner
        "\U0001f468\u200d\U0001f469\u200d\U0001f467 family",
        f"{SUBDIVISION_FLAG} Scottish docs",
        "Café ré-écriture",  # combining marks with letters
        "日本語のドキュメント",
        "tab-free  double  spaces",
    ],
)
def test_emoji_sequences_and_ordinary_text_are_kept(alias: str) -> None:
    assert clean_alias(alias) == alias


@pytest.mark.parametrize(
    "alias",
    [
        "\u3164",  # HANGUL FILLER
        "\u3164\u3164\u3164",
        "\u115f\u1160",  # Hangul choseong/jungseong fillers
        "\uffa0",  # HALFWIDTH HANGUL FILLER
        "\u2800\u2800",  # BRAILLE PATTERN BLANK
        "\u0301\u0302",  # combining marks alone
        "\u3000\u3164",  # ideographic space (stripped at the ends) around a filler
        "\u2800 \u3164",
        "\ufe0f",  # a lone variation selector
    ],
)
def test_labels_made_only_of_blank_looking_characters_are_refused(alias: str) -> None:
    assert refused(alias) == "alias must contain a visible character"


def test_existing_rules_still_hold() -> None:
    assert refused("bad\u0007bell") == "alias must not contain control characters (use plain words)"
    assert refused("x" * 81).startswith("alias is too long (81 characters; at most 80)")
    assert clean_alias("  ") is None and clean_alias("") is None
    assert refused(None) == "alias must be a string"  # type: ignore[arg-type]
