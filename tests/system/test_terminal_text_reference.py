"""Differential test: the regex-driven TerminalCleaner against a plain character-by-character model.

The model below is written for clarity, not speed: a VT-style parser that looks at one
character at a time, then the line model. Hypothesis drives both with the same random
streams, random chunking, random flushes and tiny bounds, and compares every return value.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zodex_system.terminal_text import TerminalCleaner

ESC = "\x1b"
BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
STRING_TERMINATORS = {"\x9c", "\x18", "\x1a"}  # ST (8-bit), CAN, SUB; OSC also ends at BEL


def dropped(c: str) -> bool:
    o = ord(c)
    return (o < 0x20 and c not in "\t\n\r") or 0x7F <= o <= 0x9F or o in BIDI


def in_range(c: str, low: int, high: int) -> bool:
    return low <= ord(c) <= high


class Model:
    """Whole-text reference: parse to (position, kept character) pairs, then replay lines."""

    def __init__(self, text: str, max_seq: int, max_line: int) -> None:
        self.text = text
        self.max_seq = max_seq
        self.max_line = max_line
        self.kept = self.parse()
        self.next_kept = 0
        self.committed: list[str] = []
        self.line: list[str] = []
        self.col0 = False
        self.open = False

    # -- parser: returns where a sequence ends, or None if the text ends first ----------

    def parse(self) -> list[tuple[int, str]]:
        text, i, kept = self.text, 0, []
        while i < len(text):
            c = text[i]
            if c in "\x1b\x9b\x9d\x90\x98\x9e\x9f":
                end = self.sequence(i)
                if end is None:
                    break  # undecided at the end of the stream: dropped by finish()
                i = end
            elif dropped(c):
                i += 1
            else:
                kept.append((i, c))
                i += 1
        return kept

    def sequence(self, i: int) -> int | None:
        text = self.text
        c = text[i]
        if c == "\x9b":
            return self.csi(i + 1)
        if c == "\x9d":
            return self.string(i + 1, osc=True)
        if c != ESC:
            return self.string(i + 1, osc=False)
        if i + 1 >= len(text):
            return None
        c = text[i + 1]
        if c == "[":
            return self.csi(i + 2)
        if c == "]":
            return self.string(i + 2, osc=True)
        if c in "PX^_":
            return self.string(i + 2, osc=False)
        if in_range(c, 0x20, 0x2F):
            j, count = i + 1, 0
            while j < len(text) and in_range(text[j], 0x20, 0x2F) and count < self.max_seq:
                j, count = j + 1, count + 1
            if j >= len(text):
                return None
            return j + 1 if in_range(text[j], 0x30, 0x7E) else j
        if in_range(c, 0x30, 0x7E):
            return i + 2
        return i + 1

    def csi(self, j: int) -> int | None:
        text, count = self.text, 0
        while j < len(text) and in_range(text[j], 0x20, 0x3F) and count < self.max_seq:
            j, count = j + 1, count + 1
        if j >= len(text):
            return None
        return j + 1 if in_range(text[j], 0x40, 0x7E) else j

    def string(self, j: int, *, osc: bool) -> int | None:
        text, count = self.text, 0
        terminators = STRING_TERMINATORS | ({"\x07"} if osc else set())
        while j < len(text) and text[j] != ESC and text[j] not in terminators and count < self.max_seq:
            j, count = j + 1, count + 1
        if j >= len(text):
            return None
        if text[j] in terminators:
            return j + 1
        if text[j] == ESC:
            if j + 1 >= len(text):
                return None
            return j + 2 if text[j + 1] == "\\" else j
        return j

    # -- line model -----------------------------------------------------------------------

    def advance(self, upto: int) -> None:
        """Replay the kept characters found before raw position ``upto``."""
        while self.next_kept < len(self.kept) and self.kept[self.next_kept][0] < upto:
            self.char(self.kept[self.next_kept][1])
            self.next_kept += 1

    def char(self, c: str) -> None:
        if c == "\r":
            self.col0 = True
            return
        if c == "\n":
            self.committed += [*self.line, "\n"]
            self.line, self.col0, self.open = [], False, False
            return
        if self.col0:
            self.line, self.col0 = [], False
            if self.open:
                self.committed.append("\n")
                self.open = False
        self.line.append(c)
        if len(self.line) == self.max_line:
            self.flush()

    def flush(self) -> None:
        if self.line:
            self.committed += self.line
            self.line = []
            self.open = True

    def output(self) -> str:
        return "".join(self.committed)


TOKENS = [
    "\x1b", "[", "]", "P", "X", "^", "_", "(", "#", " ", "?", "0", ";", "m", "=", "\\",
    "\x07", "\x18", "\x9b", "\x9d", "\x9c", "\x90", "\r", "\n", "\t", "\x00", "\u202e",
    "\x7f", "\x85", "~", "@",
    "a", "b", "é", "😀", "\x1b[1m", "\x1b]0;t\x07", "\r\n",
]  # fmt: skip
streams = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
# A call: ("feed", chunk end as a fraction point) or ("flush", -1).
calls = st.lists(st.one_of(st.integers(min_value=0, max_value=10_000), st.just(-1)), max_size=15)


@settings(max_examples=1000)
@given(
    text=streams,
    plan=calls,
    max_seq=st.sampled_from([1, 2, 3, 5, 4096]),
    max_line=st.sampled_from([1, 2, 3, 7, 16384]),
)
def test_cleaner_matches_character_model(text: str, plan: list[int], max_seq: int, max_line: int) -> None:
    cleaner = TerminalCleaner(max_sequence_chars=max_seq, max_line_chars=max_line)
    model = Model(text, max_seq, max_line)
    got: list[str] = []
    pos = 0
    for step in plan:
        if step == -1:
            got.append(cleaner.flush_partial())
            model.advance(pos)
            model.flush()
        else:
            end = max(pos, step % (len(text) + 1))
            got.append(cleaner.feed(text[pos:end]))
            pos = end
            model.advance(pos)
        assert "".join(got) == model.output()
    got.append(cleaner.feed(text[pos:]))
    got.append(cleaner.finish())
    model.advance(len(text))
    model.flush()
    assert "".join(got) == model.output()
