"""Turning placed chunks into new file lines, and edits into unified diff rows.

The diff comes from the chunks themselves rather than from re-diffing the whole file:
it is exact (the rows are the lines the patch added and removed) and it costs nothing
on a 20,000-line file. Hand-written for that reason: difflib.unified_diff re-diffs both
versions, which is quadratic at worst and may pair lines differently from what the patch did.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from itertools import islice

from .matcher import Placement

MAX_DIFF_ROWS = 2000
DIFF_CONTEXT = 3
_SMALL_ENOUGH_TO_REDIFF = 20_000  # lines; SequenceMatcher is quadratic in the worst case

Opcode = tuple[str, int, int, int, int]  # difflib's (tag, i1, i2, j1, j2)


@dataclass(frozen=True)
class Diff:
    rows: tuple[str, ...]
    added: int
    removed: int


class _OpcodeBuilder:
    """Appends opcodes, merging a run of the same tag into one."""

    def __init__(self) -> None:
        self.codes: list[Opcode] = []

    def push(self, tag: str, i1: int, i2: int, j1: int, j2: int) -> None:
        if i1 == i2 and j1 == j2:
            return
        if self.codes and self.codes[-1][0] == tag:
            prev = self.codes[-1]
            self.codes[-1] = (tag, prev[1], i2, prev[3], j2)
        else:
            self.codes.append((tag, i1, i2, j1, j2))


def splice(lines: list[str], placements: list[Placement]) -> tuple[list[str], list[Opcode]]:
    """Apply sorted, non-overlapping placements; return the new lines and the opcodes.

    Context lines are copied from the file, not from the patch: a chunk matched while
    ignoring whitespace or typographic quotes must not silently rewrite those lines.
    """
    out: list[str] = []
    ops = _OpcodeBuilder()
    pos = 0
    for placement in placements:
        ops.push("equal", pos, placement.start, len(out), len(out) + placement.start - pos)
        out.extend(lines[pos : placement.start])
        i = placement.start
        for kind, text in placement.chunk.items:
            if kind == " ":
                ops.push("equal", i, i + 1, len(out), len(out) + 1)
                out.append(lines[i])
                i += 1
            elif kind == "-":
                ops.push("delete", i, i + 1, len(out), len(out))
                i += 1
            else:
                ops.push("insert", i, i, len(out), len(out) + 1)
                out.append(text)
        pos = i
    ops.push("equal", pos, len(lines), len(out), len(out) + len(lines) - pos)
    out.extend(lines[pos:])
    return out, ops.codes


def rediff(old: Sequence[str], new: Sequence[str]) -> list[Opcode]:
    """Opcodes between two unrelated versions (an Add over an existing file)."""
    if len(old) + len(new) <= _SMALL_ENOUGH_TO_REDIFF:
        codes: list[Opcode] = list(SequenceMatcher(None, old, new, autojunk=False).get_opcodes())
        return codes
    builder = _OpcodeBuilder()
    builder.push("delete", 0, len(old), 0, 0)
    builder.push("insert", len(old), len(old), 0, len(new))
    return builder.codes


def unified(
    old_name: str, new_name: str, old: Sequence[str], new: Sequence[str], codes: list[Opcode]
) -> Diff:
    """Unified diff rows with three context lines, cut after MAX_DIFF_ROWS rows."""
    groups = list(_grouped(codes, DIFF_CONTEXT))
    total = 2 + sum(1 + sum(_row_count(code) for code in group) for group in groups)
    rows = list(islice(_rows(old_name, new_name, old, new, groups), MAX_DIFF_ROWS))
    if total > MAX_DIFF_ROWS:
        rows.append(f"… {total - MAX_DIFF_ROWS} more rows")
    added = sum(j2 - j1 for tag, _, _, j1, j2 in codes if tag in ("insert", "replace"))
    removed = sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag in ("delete", "replace"))
    return Diff(rows=tuple(rows), added=added, removed=removed)


def _rows(
    old_name: str, new_name: str, old: Sequence[str], new: Sequence[str], groups: list[list[Opcode]]
) -> Iterator[str]:
    yield f"--- {old_name}"
    yield f"+++ {new_name}"
    for group in groups:
        yield f"@@ -{_range(group[0][1], group[-1][2])} +{_range(group[0][3], group[-1][4])} @@"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in old[i1:i2])
                continue
            yield from ("-" + line for line in old[i1:i2])
            yield from ("+" + line for line in new[j1:j2])


def _row_count(code: Opcode) -> int:
    tag, i1, i2, j1, j2 = code
    return i2 - i1 if tag == "equal" else (i2 - i1) + (j2 - j1)


def _range(start: int, stop: int) -> str:
    """A unified-diff range: 1-based start, with the length unless it is 1."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def _grouped(codes: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """Split opcodes into hunks with `context` equal lines around each change (as difflib)."""
    if not codes or all(code[0] == "equal" for code in codes):
        return
    codes = list(codes)
    tag, i1, i2, j1, j2 = codes[0]
    if tag == "equal":
        codes[0] = (tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2)
    tag, i1, i2, j1, j2 = codes[-1]
    if tag == "equal":
        codes[-1] = (tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context))
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group
