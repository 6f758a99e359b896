"""Streaming terminal cleaner: PTY text in, what a model should read out (docs/output.md#decoding-and-cleaning).

The cleaner is fed decoded text in chunks split anywhere. It removes ANSI/VT escape
sequences and control characters, turns ``\\r\\n`` into ``\\n`` and lets a bare ``\\r``
rewind the current line so a progress bar leaves only its last state.

Output model
------------
Text is *committed* once it can no longer change. Complete lines (ending in ``\\n``) are
committed by :meth:`TerminalCleaner.feed`; the current line stays pending because a later
``\\r`` may still overwrite it. :meth:`TerminalCleaner.flush_partial` commits the pending
line as it stands (a ``Password: `` prompt must reach the model), :meth:`finish` ends the
stream.

Carriage return semantics
-------------------------
A ``\\r`` only moves the cursor to column 0, as on a terminal; the pending line is discarded
when the next *text* character arrives (it overwrites the line). A ``\\n`` after the ``\\r``
keeps the line, which is how ``\\r\\n`` becomes ``\\n`` wherever the chunks are split, and
why the doubled ``\\r\\r\\n`` a PTY makes of a program's own ``\\r\\n`` keeps its line too.
A ``\\r`` at the very end of the stream therefore leaves the last state of the line in place
(what the terminal would show) rather than erasing it.

Rewinding a line that was already flushed: committed text cannot be taken back, so when a
``\\r`` is followed by new text on a line that :meth:`flush_partial` already emitted, the
cleaner first commits a ``\\n``. Successive states then land on separate lines instead of
being glued together (``10%`` flushed, then ``\\r20%\\n`` gives ``10%\\n20%\\n``).

Bounds
------
Every escape sequence is bounded by ``max_sequence_chars``: a sequence that has not ended by
then (a stray ``ESC ]`` in binary output) is dropped and parsing resumes right after the
dropped part, so garbage can neither grow memory nor hide the rest of the output. The
pending line is bounded by ``max_line_chars``: a longer line is committed in pieces of
exactly that size (a flush at a position fixed by the text, so the result does not depend
on how the input was chunked).

Speed
-----
The worker must keep up with commands that print megabytes, so no Python code runs per
character: one regex split (see :func:`_strip_pattern`) removes sequences and controls, and
the line model works on whole runs between bare ``\r`` characters. A character-by-character
model of the same rules lives in the tests and is checked against this one.

Hand-written, not pyte or another terminal emulator: those keep a screen (a grid that
wraps, scrolls and forgets what scrolled off), where a model reads the whole stream.
"""

from __future__ import annotations

import functools
import re
from typing import Final

__all__ = ["DEFAULT_MAX_LINE_CHARS", "DEFAULT_MAX_SEQUENCE_CHARS", "TerminalCleaner"]

DEFAULT_MAX_SEQUENCE_CHARS: Final = 4096
DEFAULT_MAX_LINE_CHARS: Final = 16384

# Bidi controls can make text read differently from what it is (Trojan Source); never pass them.
_BIDI: Final = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Dropped wherever they stand outside a sequence: C0 controls but TAB, LF, CR and ESC; DEL;
# C1 controls but the 8-bit introducers CSI, OSC, DCS, SOS, PM, APC; bidi controls.
_DROP: Final = r"\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x8f\x91-\x97\x99\x9a\x9c" + _BIDI
_INTRODUCERS: Final = r"\x1b\x9b\x9d\x90\x98\x9e\x9f"  # ESC and the 8-bit CSI, OSC, DCS, SOS, PM, APC


@functools.cache  # one per bound; a session's cleaner is made on every command's path
def _strip_pattern(bound: int) -> re.Pattern[str]:
    """One regex that tokenizes everything the cleaner removes, for ``re.split``.

    Scanning left to right, every match is one whole construct, so the scan never restarts
    inside a sequence: the split is exactly a character-by-character VT parser, run in C.
    Possessive quantifiers stop backtracking from turning a cut sequence into a shorter
    "complete" one. ``(?=.)`` reads "there is a next character": an unfinished sequence is
    dropped up to it and parsing resumes there.

    The pattern starts with one character class, and branches on that character by
    lookbehind, because then the regex engine skips plain text with a fast class scan.

    A sequence that cannot be decided before the end of the text (more bytes may complete
    it) reaches only the last branch, the one capturing group: everything after the
    introducer, i.e. the tail to carry into the next chunk.
    """
    b = bound
    csi = rf"[\x20-\x3f]{{0,{b}}}+(?:[\x40-\x7e]|(?=.))"
    # A string body ends at: a terminator, ST (ESC \), before another ESC (which aborts the
    # string and starts a sequence of its own), or before a body character past the bound.
    # OSC ends with BEL or ST, DCS/SOS/PM/APC with ST only; CAN/SUB abort any string.
    string_end = r"(?:[{term}]|\x1b\\|(?=\x1b[^\\])|(?=[^\x1b]))"
    osc = rf"[^\x07\x18\x1a\x1b\x9c]{{0,{b}}}+" + string_end.format(term=r"\x07\x9c\x18\x1a")
    dcs = rf"[^\x18\x1a\x1b\x9c]{{0,{b}}}+" + string_end.format(term=r"\x9c\x18\x1a")
    after_esc = [
        rf"\[{csi}",
        rf"\]{osc}",
        rf"[PX^_]{dcs}",  # DCS, SOS, PM, APC
        # nF escapes: charset designations (ESC ( B, ESC % G), ESC # 8, ...
        rf"[\x20-\x2f]{{1,{b}}}+(?:[\x30-\x7e]|(?=.))",
        # Two-character escapes (ESC =, ESC 7, ESC M, ESC c): 0x30-0x7E but [ ] P X ^ _.
        r"[\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e]",
        r"(?=[^\x20-\x7e])",  # ESC before a non-sequence character: drop the ESC alone
    ]
    branches = [
        rf"(?<=[{_DROP}])[{_DROP}]*+",
        rf"(?<=\x1b)(?:{'|'.join(after_esc)})",
        rf"(?<=\x9b){csi}",
        rf"(?<=\x9d){osc}",
        rf"(?<=[\x90\x98\x9e\x9f]){dcs}",
        r"(.*)",  # undecided at the end of the text: the carry
    ]
    return re.compile(rf"[{_DROP}{_INTRODUCERS}](?:{'|'.join(branches)})", re.DOTALL)


class TerminalCleaner:
    """Streaming, pure (no I/O) cleaner of terminal output. See the module docstring."""

    def __init__(
        self,
        *,
        max_sequence_chars: int = DEFAULT_MAX_SEQUENCE_CHARS,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    ) -> None:
        if max_sequence_chars < 1 or max_line_chars < 1:
            raise ValueError("max_sequence_chars and max_line_chars must be positive")
        self._max_line = max_line_chars
        self._strip = _strip_pattern(max_sequence_chars)
        self._carry = ""  # an escape sequence cut by the end of the last chunk
        self._out: list[str] = []  # committed during the current call
        self._line: list[str] = []  # the pending (not yet committed) current line
        self._line_len = 0
        self._at_col0 = False  # a bare CR was seen; the next text overwrites the line
        self._open = False  # part of the current line was already committed

    # -- public API ---------------------------------------------------------------------

    def feed(self, text: str) -> str:
        """Clean ``text``; return the newly committed text (complete lines)."""
        if self._carry:
            text = self._carry + text
            self._carry = ""
        self._process(text)
        return self._take_out()

    def flush_partial(self) -> str:
        """Commit the pending partial line as it stands and return all committed text."""
        self._commit_partial()
        return self._take_out()

    def insert_line(self, text: str) -> str:
        """Commit ``text`` as a line of its own after whatever is pending; return committed.

        For Zodex's own notices. The pending line is committed first and ended, so the
        notice never joins the command's output; an escape sequence cut at the end of the
        last chunk stays carried, because the command's next bytes still continue it.
        """
        self._commit_partial()
        if self._open:
            self._out.append("\n")
        self._out.append(text if text.endswith("\n") else text + "\n")
        self._open = False
        self._at_col0 = False
        return self._take_out()

    def finish(self) -> str:
        """End the stream: drop an unfinished escape sequence, commit the pending line."""
        self._carry = ""
        self._commit_partial()
        self._open = False
        self._at_col0 = False
        return self._take_out()

    def pending_line(self) -> str:
        """The pending line as it stands, left pending (what a flush would commit now)."""
        return "".join(self._line)

    def has_partial(self) -> bool:
        """Whether the pending line holds text that a flush would commit."""
        return self._line_len > 0

    @property
    def held_chars(self) -> int:
        """Characters held in memory: the pending line and a carried escape sequence."""
        return self._line_len + len(self._carry)

    # -- parsing ------------------------------------------------------------------------

    def _process(self, text: str) -> None:
        pieces = self._strip.split(text)
        if len(pieces) > 1:
            # [text, group, text, group, ..., text]: the group is None except for a carry,
            # which can only be the last match.
            carry = pieces[-2]
            if carry is not None:  # the introducer is not in the group, but is right before it
                self._carry = text[len(text) - len(carry) - 1 :]
            text = "".join(pieces[::2])
        if not text:
            return
        if "\r" not in text:
            self._plain(text)
            return
        # In this line model "\r\n" and "\n" are the same (a CR before LF keeps the line),
        # and removing the pairs first leaves only the rare bare CRs to a Python loop.
        first, *rest = text.replace("\r\n", "\n").split("\r")
        if first:
            self._plain(first)
        for run in rest:
            self._at_col0 = True
            if run:
                self._plain(run)

    # -- line model ---------------------------------------------------------------------

    def _plain(self, run: str) -> None:
        """Take a run of text characters (TAB and LF included)."""
        if self._at_col0:
            self._at_col0 = False
            if run[0] != "\n":
                self._rewind()
        nl = run.rfind("\n")
        if nl < 0:
            self._append(run)
            return
        # Everything up to the last LF is committed in one piece: with no CR inside a run
        # nothing can rewind it, and this keeps line-oriented output at C speed.
        if self._line:
            self._out.append("".join(self._line))
            self._line.clear()
            self._line_len = 0
        self._open = False
        if nl == len(run) - 1:
            self._out.append(run)
            return
        self._out.append(run[: nl + 1])
        self._append(run[nl + 1 :])

    def _append(self, s: str) -> None:
        """Add text without LF to the pending line, committing it at max_line_chars."""
        total = self._line_len + len(s)
        while total >= self._max_line:
            take = self._max_line - self._line_len
            self._line.append(s[:take])
            self._line_len = self._max_line
            self._commit_partial()
            s = s[take:]
            total = len(s)
        if s:
            self._line.append(s)
            self._line_len = total

    def _rewind(self) -> None:
        self._line.clear()
        self._line_len = 0
        if self._open:
            # That line was already given out; start the new state on a line of its own.
            self._out.append("\n")
            self._open = False

    def _commit_partial(self) -> None:
        if self._line_len:
            self._out.append("".join(self._line))
            self._line.clear()
            self._line_len = 0
            self._open = True

    def _take_out(self) -> str:
        if not self._out:
            return ""
        out = "".join(self._out)
        self._out.clear()
        return out
