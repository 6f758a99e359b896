"""Properties: terminal-text cleaning does not depend on how the stream is cut into chunks."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from zodex_system.terminal_text import TerminalCleaner

# Fragments that make up escape sequences and line control, so that random text is full of
# sequences, half-sequences and CR/LF interplay rather than plain letters.
TOKENS = [
    "\x1b", "[", "]", "P", "X", "^", "_", "(", "%", "#", " ", "?", "0", "1", ";", "m", "B",
    "\x07", "\\", "\x18", "\x9b", "\x9d", "\x9c", "\x90", "\r", "\n", "\t", "\x00", "\x08",
    "\x7f", "\u200e", "a", "é", "😀", "\ufffd", "\x1b[31m", "\x1b]0;t\x07", "\r\n",
]  # fmt: skip

streams = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=3)), max_size=80).map("".join)
# Anything the cleaner lets through matches none of these.
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(chunks: list[str], **bounds: int) -> str:
    cleaner = TerminalCleaner(**bounds)
    return "".join(cleaner.feed(chunk) for chunk in chunks) + cleaner.finish()


def cut(text: str, points: list[int]) -> list[str]:
    edges = [0, *sorted(p % (len(text) + 1) for p in points), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=400)
@given(text=streams, points=st.lists(st.integers(min_value=0), max_size=12))
def test_cleaning_is_independent_of_chunking(text: str, points: list[int]) -> None:
    assert clean(cut(text, points)) == clean([text])


@settings(max_examples=400)
@given(
    text=streams,
    points=st.lists(st.integers(min_value=0), max_size=12),
    max_sequence_chars=st.integers(min_value=1, max_value=6),
    max_line_chars=st.integers(min_value=1, max_value=6),
)
def test_bounds_are_independent_of_chunking(
    text: str, points: list[int], max_sequence_chars: int, max_line_chars: int
) -> None:
    bounds = {"max_sequence_chars": max_sequence_chars, "max_line_chars": max_line_chars}
    assert clean(cut(text, points), **bounds) == clean([text], **bounds)


@given(text=streams)
def test_output_has_no_controls_and_is_a_fixed_point(text: str) -> None:
    cleaned = clean([text])
    assert FORBIDDEN.search(cleaned) is None
    assert clean([cleaned]) == cleaned
