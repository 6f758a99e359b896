"""Waiting for a pattern in a session's output (docs/tools.md#waiting-for-output).

An :class:`OutputWatch` is given the cleaned text as the session's output commits it, and is
checked each time the waiting call wakes — on output, never on a timer. A check searches
the text committed since the last one, after a bounded overlap of what came before (so a
match split across reads is found), plus the pending line as it stands (a prompt has no
line end yet). Text before the watch began is context only: no match starts there.
"""

from __future__ import annotations

from typing import Final

from zodex_protocol.wait_pattern import WaitPattern, matched_text

# A match split across reads is found when it is at most this long (bytes of UTF-8); each
# check searches this much again, so it bounds the cost of checking often.
OVERLAP_BYTES: Final = 16 * 1024
# Text added but not yet checked is searched at once past this: the waiting call may not
# check for a while (typing a long input), and the text must not pile up meanwhile.
UNCHECKED_CHARS: Final = 1024 * 1024


def _char_start(data: bytes, at: int) -> int:
    """The first index ``>= at`` that does not split a UTF-8 character of ``data``."""
    while at < len(data) and (data[at] & 0xC0) == 0x80:
        at += 1
    return at


class OutputWatch:
    def __init__(self, pattern: WaitPattern, context: str = "") -> None:
        """``context``: the text just before the watch began (its last character is kept,
        so ``^`` and ``\\b`` see what precedes the first new character)."""
        self.pattern = pattern
        self._window = context[-1:].encode("utf-8", "replace")
        self._start = len(self._window)  # where a match may begin
        self._new: list[str] = []
        self._new_chars = 0
        self.matched: str | None = None

    def add(self, committed: str) -> None:
        """Text the output committed (cleaned, in order)."""
        if self.matched is None:
            self._new.append(committed)
            self._new_chars += len(committed)
            if self._new_chars > UNCHECKED_CHARS:
                self.check()  # the pending line is left to the call's own check

    def search_apart(self, text: str) -> bool:
        """Search ``text`` on its own: a part of the new output that the rest does not
        follow (the head of an undelivered preview)."""
        if self.matched is None:
            data = text.encode("utf-8", "replace")
            span = self.pattern.search(data, 0)
            if span is not None:
                self.matched = matched_text(data[span[0] : span[1]])
        return self.matched is not None

    def check(self, pending_line: str = "") -> bool:
        """Whether the output matched: the text added since the last check, after the
        overlap, followed by ``pending_line`` (the line not yet committed)."""
        if self.matched is not None:
            return True
        window = self._window
        if self._new:
            window += "".join(self._new).encode("utf-8", "replace")
            self._new.clear()
            self._new_chars = 0
        text = window + pending_line.encode("utf-8", "replace") if pending_line else window
        span = self.pattern.search(text, self._start)
        if span is not None:
            self.matched = matched_text(text[span[0] : span[1]])
            return True
        if len(window) - self._start > OVERLAP_BYTES:
            cut = _char_start(window, len(window) - OVERLAP_BYTES)
            window = window[cut - 1 :]  # one byte before the cut stays as context
            self._start = 1
        self._window = window
        return False
