"""The ``wait_for`` pattern of exec_command and write_stdin (docs/tools.md#waiting-for-output).

The pattern comes from the model, so it is untrusted: it is compiled by RE2, whose matching
is linear in the text whatever the pattern (no backtracking, so ``(a+)+$`` cannot stall a
worker), and an invalid one is refused with the position of the fault. Python's own ``re``
only *parses* a refused pattern, never matches with it, because its messages name a
position where RE2's do not.

Matching works on UTF-8 bytes: the worker keeps its window of output encoded, and RE2's
Python wrapper would otherwise encode the whole text and map offsets back on each search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

import re2

from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.validation import check_length

FIELD: Final = "wait_for"
MAX_PATTERN_CHARS: Final = 1000
MAX_MATCHED_TEXT_CHARS: Final = 200
# What ended a call that had a wait_for: the ``wait`` field of its result.
MATCHED: Final = "matched"
EXITED: Final = "exited"
YIELD: Final = "yield"
OUTCOMES: Final = (MATCHED, EXITED, YIELD)

# Multi-line: a stream has no meaningful "start of text" once it is matched piece by piece,
# so ^ and $ are line anchors; $ also matches at the end of the output so far (a prompt).
_FLAGS: Final = "(?m)"
_RE2_ONLY_HINT: Final = (
    "wait_for is RE2 syntax, matched in linear time: no lookaround, backreferences, "
    "possessive quantifiers or repetition counts above 1000"
)


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would write each refused pattern to the worker's stderr
    return options


_OPTIONS: Final = _options()


@dataclass(frozen=True)
class WaitPattern:
    """A checked ``wait_for``: its text as given and its compiled form."""

    source: str
    _regexp: Any = field(compare=False, repr=False)

    @classmethod
    def compile(cls, source: str) -> WaitPattern:
        """``source`` checked and compiled, or a ProtocolError (INVALID_ARGUMENT) naming
        the field and, for a syntax error, the position (0-based, in characters)."""
        if not source:
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, f"{FIELD} must not be empty")
        check_length(FIELD, source, MAX_PATTERN_CHARS)
        try:
            regexp = re2.compile(_FLAGS + source, _OPTIONS)
        except re2.error as exc:
            raise ProtocolError(ErrorCode.INVALID_ARGUMENT, _refusal(source, exc)) from None
        return cls(source, regexp)

    def search(self, text: bytes, start: int) -> tuple[int, int] | None:
        """The byte span of the leftmost match in ``text`` that starts at or after
        ``start``; the bytes before ``start`` are context (for ``^`` and ``\\b``)."""
        found = self._regexp.search(text, start)
        if found is None:
            return None
        begin, end = found.span()
        return int(begin), int(end)


def matched_text(data: bytes) -> str:
    """What a result reports of a match: at most 200 characters, cut with ``…``."""
    text = data.decode("utf-8", "replace")
    if len(text) > MAX_MATCHED_TEXT_CHARS:
        return text[: MAX_MATCHED_TEXT_CHARS - 1] + "…"
    return text


def _refusal(source: str, exc: Exception) -> str:
    """The one line for a pattern RE2 refused. Python's parser knows where most syntax
    errors are; what it accepts but RE2 does not (lookaround, backreferences) is located
    by the fragment RE2 names."""
    try:
        re.compile(source)
    except re.error as parsed:
        position = parsed.pos if parsed.pos is not None else 0
        return f"{FIELD} is not a valid regular expression at position {position}: {parsed.msg}"
    except (RecursionError, OverflowError, ValueError) as other:
        return f"{FIELD} is not a valid regular expression: {other}"
    reason = exc.args[0] if exc.args else str(exc)
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    code, _, fragment = str(reason).partition(": ")
    fragment = fragment.removeprefix(_FLAGS)
    at = source.find(fragment) if fragment else -1
    if at < 0:
        return f"{FIELD} cannot be used: {reason} ({_RE2_ONLY_HINT})"
    return f"{FIELD} is not supported at position {at}: {code} {fragment} ({_RE2_ONLY_HINT})"
