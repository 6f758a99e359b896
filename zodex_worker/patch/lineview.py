"""Searching a file's lines for a sequence, with the four matching passes of docs/apply_patch.md#locating-chunks.

Each pass compares normalised lines: exact; trailing whitespace ignored; surrounding
whitespace ignored; surrounding whitespace ignored and typographic dashes, quotes and
spaces folded to ASCII. A search tries the passes in that order, each over every
allowed position, and stops at the first pass that finds something.

Normalised copies and a line -> positions index are built lazily per pass, so a search
costs a dict lookup plus a few slice comparisons instead of a scan of the file; this is
what keeps a 200-chunk patch over a 20,000-line file fast.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

_FOLD_TABLE = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000", " "
        ),
    }
)


def fold(line: str) -> str:
    """The loosest comparison form of a line (the fourth pass)."""
    stripped = line.strip()
    # isascii() is O(1) in CPython; most source lines have nothing to fold.
    return stripped if stripped.isascii() else stripped.translate(_FOLD_TABLE)


def _identity(line: str) -> str:
    return line


# The passes, loosest last: exact, ignoring trailing whitespace, ignoring surrounding
# whitespace, ignoring whitespace and typographic punctuation.
NORMALISERS: tuple[Callable[[str], str], ...] = (_identity, str.rstrip, str.strip, fold)


class LineView:
    """A file's lines plus lazily built per-pass normalised views and indexes."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self._views: dict[int, list[str]] = {0: lines}
        self._indexes: dict[int, dict[str, list[int]]] = {}
        self._scan_missed: set[int] = set()

    def __len__(self) -> int:
        return len(self.lines)

    def view(self, pass_no: int) -> list[str]:
        found = self._views.get(pass_no)
        if found is None:
            normalise = NORMALISERS[pass_no]
            found = self._views[pass_no] = [normalise(line) for line in self.lines]
        return found

    def _index(self, pass_no: int) -> dict[str, list[int]]:
        index = self._indexes.get(pass_no)
        if index is None:
            index = {}
            for position, line in enumerate(self.view(pass_no)):
                index.setdefault(line, []).append(position)
            self._indexes[pass_no] = index
        return index

    def _matches(self, pass_no: int, pattern: Sequence[str], start: int, eof: bool) -> list[int]:
        """Every position >= start where `pattern` matches in one pass, ascending."""
        normalise = NORMALISERS[pass_no]
        wanted = [normalise(line) for line in pattern]
        view = self.view(pass_no)
        size = len(wanted)
        last = len(view) - size
        if eof:
            return [last] if last >= max(start, 0) and view[last:] == wanted else []
        candidates = self._index(pass_no).get(wanted[0], [])
        return [
            i
            for i in candidates[bisect_left(candidates, start) :]
            if i <= last and view[i : i + size] == wanted
        ]

    def first(self, pattern: Sequence[str], start: int, eof: bool) -> int | None:
        """The first position >= start where `pattern` matches, trying passes in order."""
        if not pattern:
            raise ValueError("cannot search for an empty pattern")
        for pass_no in range(len(NORMALISERS)):
            found = self._first_in_pass(pass_no, pattern, start, eof)
            if found is not None:
                return found
        return None

    def _first_in_pass(self, pass_no: int, pattern: Sequence[str], start: int, eof: bool) -> int | None:
        if eof:
            hits = self._matches(pass_no, pattern, start, eof)
            return hits[0] if hits else None
        normalise = NORMALISERS[pass_no]
        wanted = [normalise(line) for line in pattern]
        view = self.view(pass_no)
        size = len(wanted)
        last = len(view) - size
        if pass_no not in self._indexes and pass_no not in self._scan_missed:
            # In-order chunks usually sit a little after the previous one, so a C-level
            # list.index() scan beats building the index. A miss scans to the end of the
            # file, so after the first one this pass switches to the index for good.
            found = _scan(view, wanted, start, last)
            if found is None:
                self._scan_missed.add(pass_no)
            return found
        candidates = self._index(pass_no).get(wanted[0], [])
        # Walk by index: slicing `candidates` would copy it on every call, and a common
        # first line (an empty line, a lone brace) can have thousands of positions.
        k = bisect_left(candidates, start)
        while k < len(candidates) and candidates[k] <= last:
            i = candidates[k]
            if view[i : i + size] == wanted:
                return i
            k += 1
        return None

    def all(self, pattern: Sequence[str], eof: bool) -> list[int]:
        """Every position of `pattern` in the strictest pass that finds any."""
        if not pattern:
            raise ValueError("cannot search for an empty pattern")
        for pass_no in range(len(NORMALISERS)):
            hits = self._matches(pass_no, pattern, 0, eof)
            if hits:
                return hits
        return []


def _scan(view: list[str], wanted: list[str], start: int, last: int) -> int | None:
    """First i in [start, last] with view[i : i + len(wanted)] == wanted."""
    i = max(start, 0)
    while i <= last:
        try:
            i = view.index(wanted[0], i, last + 1)
        except ValueError:
            return None
        if view[i : i + len(wanted)] == wanted:
            return i
        i += 1
    return None
