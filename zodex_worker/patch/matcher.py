"""Locating an Update File section's chunks in a file (docs/apply_patch.md#locating-chunks).

First in order, as Codex does: each chunk is searched after the previous one and takes
the first match. If that fails, out of order: every chunk is searched in the whole
file; it must match exactly one place and no two chunks may overlap. Zodex never picks
one of several occurrences.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from .lineview import LineView
from .model import Chunk


@dataclass(frozen=True)
class Placement:
    """Where one chunk applies: it replaces file lines [start, start + length)."""

    start: int
    length: int
    chunk: Chunk  # the variant that matched (maybe without trailing blank lines)
    number: int  # 1-based position of the chunk in its Update File section


@dataclass(frozen=True)
class Miss:
    """A chunk's `@@` anchor (`context`) or, when `context` is None, its old lines are absent."""

    number: int
    chunk: Chunk
    context: str | None
    search_from: int  # 0-based line where the failed search started


@dataclass(frozen=True)
class Ambiguous:
    """A chunk that matches several places once in-order matching has failed."""

    number: int
    chunk: Chunk
    starts: tuple[int, ...]  # 0-based start (or insertion point) of each match
    insertion: bool  # a pure addition whose `@@` anchor occurs several times


@dataclass(frozen=True)
class Overlap:
    first: Placement
    second: Placement


MatchFailure = Miss | Ambiguous | Overlap


def locate(view: LineView, chunks: tuple[Chunk, ...]) -> list[Placement] | MatchFailure:
    """Placements sorted by position, or why the chunks cannot be placed."""
    in_order = _in_order(view, chunks)
    if isinstance(in_order, list):
        return in_order
    return _any_order(view, chunks)


def _variants(chunk: Chunk) -> tuple[Chunk, ...]:
    """The chunk as written, then without trailing bare blank lines.

    docs/apply_patch.md#format makes an empty line an empty context line, and also allows blank lines
    between chunks; trailing ones are ambiguous, so they are tried as context first
    (which is what Codex does) and dropped only when that does not match.
    """
    if not chunk.trailing_blanks:
        return (chunk,)
    return (chunk, chunk.without_trailing_blanks())


def _place_after(view: LineView, chunk: Chunk, start: int, number: int) -> Placement | None:
    """The first placement of `chunk` at or after line `start` (an anchor's next line)."""
    for variant in _variants(chunk):
        old = variant.old
        if not old:
            # Pure addition: right after its `@@` anchor, else at the end of the file.
            at = start if variant.contexts and not variant.eof else len(view)
            return Placement(at, 0, variant, number)
        found = view.first(old, start, variant.eof)
        if found is not None:
            return Placement(found, len(old), variant, number)
    return None


def _in_order(view: LineView, chunks: tuple[Chunk, ...]) -> list[Placement] | Miss:
    placements: list[Placement] = []
    cursor = 0
    for number, chunk in enumerate(chunks, 1):
        position = cursor
        for context in chunk.contexts:
            found = view.first((context,), position, eof=False)
            if found is None:
                return Miss(number, chunk, context, position)
            position = found + 1
        placement = _place_after(view, chunk, position, number)
        if placement is None:
            return Miss(number, chunk, None, position)
        placements.append(placement)
        # An unanchored pure addition goes to the end without moving the cursor (Codex).
        if placement.length or chunk.contexts:
            cursor = placement.start + placement.length
    # Unanchored additions sit at the end; a stable sort keeps same-position order.
    placements.sort(key=lambda p: (p.start, p.length > 0))
    return placements


def _any_order(view: LineView, chunks: tuple[Chunk, ...]) -> list[Placement] | MatchFailure:
    placements: list[Placement] = []
    for number, chunk in enumerate(chunks, 1):
        found = _unique_placement(view, chunk, number)
        if not isinstance(found, Placement):
            return found
        placements.append(found)
    # At one position an insertion goes before a replacement; otherwise keep patch order.
    placements.sort(key=lambda p: (p.start, p.length > 0, p.number))
    for first, second in pairwise(placements):
        if second.start < first.start + first.length:
            return Overlap(first, second)
    return placements


def _unique_placement(view: LineView, chunk: Chunk, number: int) -> Placement | Miss | Ambiguous:
    candidates: dict[tuple[int, int], Placement] = {}
    if chunk.contexts:
        anchors = view.all((chunk.contexts[0],), eof=False)
        if not anchors:
            return Miss(number, chunk, chunk.contexts[0], 0)
        starts = sorted({a + 1 for a in anchors})
        for context in chunk.contexts[1:]:
            nested = {view.first((context,), s, eof=False) for s in starts}
            if nested == {None}:
                return Miss(number, chunk, context, starts[0])
            starts = sorted(n + 1 for n in nested if n is not None)
        for start in starts:
            placement = _place_after(view, chunk, start, number)
            if placement is not None:
                candidates[(placement.start, placement.length)] = placement
        if not candidates:
            return Miss(number, chunk, None, starts[0])
    else:
        for variant in _variants(chunk):
            if not variant.old:
                return Placement(len(view), 0, variant, number)
            hits = view.all(variant.old, variant.eof)
            for hit in hits:
                candidates[(hit, len(variant.old))] = Placement(hit, len(variant.old), variant, number)
            if hits:
                break
        if not candidates:
            return Miss(number, chunk, None, 0)
    if len(candidates) > 1:
        starts = sorted(start for start, _ in candidates)
        insertion = all(p.length == 0 for p in candidates.values())
        return Ambiguous(number, chunk, tuple(starts), insertion)
    return next(iter(candidates.values()))
