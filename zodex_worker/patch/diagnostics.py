"""Explaining why chunks could not be placed, so the model can fix its patch without
reading the file again: the nearest region and how it differs (docs/apply_patch.md#results)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from difflib import get_close_matches

from .lineview import LineView, fold
from .matcher import Ambiguous, MatchFailure, Miss, Overlap

_MAX_SHOWN_LINES = 40
_MAX_DIFFERENCES = 8
_MAX_LINE_NUMBERS = 10
_CLOSE_MATCH_LIMIT = 50_000  # lines; difflib's fuzzy search is too slow beyond that
_UNIFIED_RANGE = re.compile(r"^-\d+(,\d+)? \+\d+(,\d+)? @@")


def describe(failure: MatchFailure, view: LineView, path: str) -> str:
    if isinstance(failure, Miss):
        if failure.context is not None:
            return _missing_context(failure, view, path)
        return _missing_lines(failure, view, path)
    if isinstance(failure, Ambiguous):
        return _ambiguous(failure, path)
    return _overlap(failure, path)


def _missing_context(miss: Miss, view: LineView, path: str) -> str:
    context = miss.context or ""
    text = f"Failed to find context '{context}' in {path}"
    if miss.search_from > 0:
        text += f" after line {miss.search_from}"
    parts = [text]
    if _UNIFIED_RANGE.match(context.strip()):
        parts.append(
            "'@@' takes a line of the file to anchor on (or nothing), not unified-diff line numbers."
        )
    parts.append(_closest_line(view, context))
    return "\n".join(part for part in parts if part)


def _missing_lines(miss: Miss, view: LineView, path: str) -> str:
    chunk = miss.chunk
    old = chunk.old
    trimmed = chunk.without_trailing_blanks().old
    if trimmed:
        old = trimmed  # trailing spacing lines would only add noise to the comparison
    head = f"Failed to find expected lines in {path}:\n{_show_lines(chunk.old)}"
    anywhere = view.all(old, eof=False)
    if anywhere and chunk.eof:
        return (
            f"{head}\nThese lines occur at line {anywhere[0] + 1}, but the chunk ends with "
            f"'*** End of File' and they are not the last lines of the file ({len(view)} lines)."
        )
    if anywhere and chunk.contexts:
        return (
            f"{head}\nThese lines occur at line {anywhere[0] + 1}, but not after the "
            f"'@@ {chunk.contexts[-1]}' anchor (found at line {miss.search_from})."
        )
    return f"{head}\n{_nearest_region(view, old)}"


def _loose(line: str) -> str:
    return fold(line.replace("\ufeff", "").replace("\r", ""))


def _nearest_region(view: LineView, old: Sequence[str]) -> str:
    if not len(view):
        return "The file is empty."
    # A region may run past the end of the file: "the file ends here" is a difference too.
    last_start = len(view) - 1
    positions: dict[str, list[int]] = {}
    for i, line in enumerate(view.lines):
        positions.setdefault(_loose(line), []).append(i)
    # Each pattern line votes for the region starts that would align it with an equal
    # line of the file. Blank lines are everywhere, so they only vote when nothing else can.
    keys = [_loose(line) for line in old]
    voters = [(j, key) for j, key in enumerate(keys) if key] or list(enumerate(keys))
    votes: Counter[int] = Counter()
    for j, key in voters:
        for i in positions.get(key, ()):
            if 0 <= i - j <= last_start:
                votes[i - j] += 1
    if not votes:
        hint = _closest_line(view, next((line for line in old if line.strip()), old[0]))
        return "No similar region: none of these lines occur in the file, even ignoring whitespace." + (
            f"\n{hint}" if hint else ""
        )
    start = min(votes, key=lambda s: (-votes[s], s))
    return _region_report(view, old, start)


def _region_report(view: LineView, old: Sequence[str], start: int) -> str:
    differences: list[str] = []
    for j, wanted in enumerate(old):
        line_no = start + j + 1
        if start + j >= len(view):
            ended = f"the file ends at line {len(view)}"
            differences.append(f"  line {line_no}: {ended}; patch expects {wanted!r}")
            continue
        actual = view.lines[start + j]
        kind = _difference(actual, wanted)
        if kind is not None:
            differences.append(f"  line {line_no} ({kind}): file has {actual!r}, patch expects {wanted!r}")
    count = len(differences)
    shown = differences[:_MAX_DIFFERENCES]
    if count > _MAX_DIFFERENCES:
        shown.append(f"  … and {count - _MAX_DIFFERENCES} more differing lines")
    noun = "line" if len(old) == 1 else "lines"
    title = f"Nearest match at line {start + 1} (differs in {count} of {len(old)} {noun}):"
    return "\n".join([title, *shown])


def _difference(actual: str, wanted: str) -> str | None:
    """How a file line differs from the patch's line, most specific reason first."""
    if actual == wanted:
        return None
    # "tolerated" marks differences a looser matching pass forgives on its own, so the
    # model knows which line it actually has to fix.
    if actual.replace("\r", "") == wanted.replace("\r", ""):
        return "line ending: stray carriage return, tolerated"
    if actual.replace("\ufeff", "") == wanted.replace("\ufeff", ""):
        return "byte-order mark U+FEFF"
    if actual.strip() == wanted.strip():
        return "whitespace only, tolerated"
    if fold(actual) == fold(wanted):
        return "typographic punctuation only, tolerated"
    return "different text"


def _closest_line(view: LineView, wanted: str) -> str:
    if not wanted.strip() or not len(view) or len(view) > _CLOSE_MATCH_LIMIT:
        return ""
    by_text: dict[str, int] = {}
    for i, line in enumerate(view.lines):
        by_text.setdefault(line.strip(), i)
    close = get_close_matches(wanted.strip(), list(by_text), n=1, cutoff=0.6)
    if not close:
        return ""
    i = by_text[close[0]]
    return f"Closest line: line {i + 1}: {view.lines[i]!r}"


def _ambiguous(failure: Ambiguous, path: str) -> str:
    chunk = failure.chunk
    if failure.insertion:
        where = f"its '@@' anchor occurs at lines {_numbers(list(failure.starts))}"
    else:
        lines = _numbers([s + 1 for s in failure.starts])
        where = f"it matches {len(failure.starts)} places, at lines {lines}"
    return (
        f"Ambiguous context in {path}: chunk {failure.number} (patch line {chunk.line}) could not be "
        f"applied in order, and out of order {where}. Zodex does not guess which one is meant; add "
        f"context lines or an '@@ <line>' anchor that occurs once.\n{_show_lines(chunk.old)}"
    )


def _overlap(failure: Overlap, path: str) -> str:
    first, second = failure.first, failure.second  # in file order
    end = min(first.start + first.length, second.start + max(second.length, 1))
    where = f"line {end}" if end == second.start + 1 else f"lines {second.start + 1}-{end}"
    low, high = sorted((first, second), key=lambda p: p.number)
    return (
        f"Chunks {low.number} and {high.number} (patch lines {low.chunk.line} and "
        f"{high.chunk.line}) of {path} could not be applied in order, and out of order they "
        f"overlap at {where}. Merge them into one chunk or list them in file order."
    )


def _numbers(values: Sequence[int]) -> str:
    shown = [str(v) for v in values[:_MAX_LINE_NUMBERS]]
    if len(values) > _MAX_LINE_NUMBERS:
        return ", ".join(shown) + f" and {len(values) - _MAX_LINE_NUMBERS} more"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _show_lines(lines: Sequence[str]) -> str:
    shown = list(lines[:_MAX_SHOWN_LINES])
    if len(lines) > _MAX_SHOWN_LINES:
        shown.append(f"… ({len(lines) - _MAX_SHOWN_LINES} more lines)")
    return "\n".join(shown)
