"""Skill catalogs: every ``SKILL.md`` under some roots, as ``name — description — path``.

The walk is bounded (depth, directories, entries) so a huge or looping tree costs little:
symlinked directories are followed, since people link skills in from their repositories,
but each real directory is entered once. Hidden directories are skipped, and so are the
subfolders of a skill (its scripts and references are not skills, and may be large).
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.context.files import read_prefix
from zodex_gateway.context.frontmatter import parse_front_matter

SKILL_FILE = "SKILL.md"
CATALOG_LIMIT = 50
NAME_LIMIT = 100
DESCRIPTION_LIMIT = 200
# Front matter sits at the top; a header that does not close within this is broken.
_HEAD_BYTES = 16 * 1024
_MAX_DEPTH = 6
_MAX_DIRS = 2000
_MAX_ENTRIES = 50_000


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    """One line, at most ``DESCRIPTION_LIMIT`` characters; empty when the file gives none."""
    path: str
    """Absolute path of the ``SKILL.md``, as found under its root."""


@dataclass(frozen=True)
class SkillCatalog:
    skills: tuple[Skill, ...]
    """Sorted by name (case-insensitive), then path; at most the catalog limit."""
    omitted: int
    """Skills found but not listed because of the limit."""


def scan_catalog(roots: Sequence[Path], limit: int = CATALOG_LIMIT) -> SkillCatalog:
    """The skills under ``roots``; a skill reachable twice (a linked root) is listed once."""
    seen: set[str] = set()
    found: list[Skill] = []
    walk = _Walk()
    for root in roots:
        for path in walk.skill_files(root):
            real = os.path.realpath(path)
            if real not in seen:
                seen.add(real)
                found.append(read_skill(path))
    found.sort(key=lambda skill: (skill.name.casefold(), skill.name, skill.path))
    return SkillCatalog(tuple(found[:limit]), max(0, len(found) - limit))


def read_skill(path: Path) -> Skill:
    """A catalog entry for one ``SKILL.md``; a missing or damaged header falls back to the folder name."""
    prefix = read_prefix(path, _HEAD_BYTES)
    fields = parse_front_matter(prefix.data.decode("utf-8", "replace")) if prefix else None
    fields = fields or {}
    name = _bounded(_one_line(fields.get("name", "")), NAME_LIMIT) or path.parent.name
    return Skill(name, summarize(fields.get("description", "")), str(path))


def summarize(text: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """One line of at most ``limit`` characters, ending on a sentence when one fits well."""
    line = _one_line(text)
    if len(line) <= limit:
        return line
    head = line[:limit]
    sentence_end = max(head.rfind(mark) for mark in (". ", "! ", "? "))
    if sentence_end >= limit // 3:
        return head[: sentence_end + 1]
    return _bounded(line, limit)


def _one_line(text: str) -> str:
    # Control characters would break the one-entry-per-line rendering.
    words = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text).split()
    return " ".join(words)


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit)
    return (text[:space] if space >= limit // 2 else text[: limit - 1]) + "…"


class _Walk:
    """One bounded depth-first walk over several roots, sharing its budget and visited set."""

    def __init__(self) -> None:
        self._visited: set[tuple[int, int]] = set()
        self._dirs = 0
        self._entries = 0

    def skill_files(self, root: Path) -> Iterator[Path]:
        if not self._enter(root):  # missing, unreadable, or already walked under another name
            return
        stack = [(root, 0)]
        while stack and self._dirs < _MAX_DIRS and self._entries < _MAX_ENTRIES:
            directory, depth = stack.pop()
            self._dirs += 1
            entries = self._list(directory)
            if any(entry.name == SKILL_FILE and _is_file(entry) for entry in entries):
                yield directory / SKILL_FILE
                continue
            if depth >= _MAX_DEPTH:
                continue
            children = [
                Path(entry.path)
                for entry in entries
                if not entry.name.startswith(".") and _is_dir(entry) and self._enter(Path(entry.path))
            ]
            # Reversed so that the stack pops children in name order (deterministic walks).
            stack.extend((child, depth + 1) for child in reversed(children))

    def _enter(self, directory: Path) -> bool:
        """True the first time a real directory is met (loops and links end here)."""
        try:
            info = os.stat(directory)
        except OSError:
            return False
        key = (info.st_dev, info.st_ino)
        if key in self._visited:
            return False
        self._visited.add(key)
        return True

    def _list(self, directory: Path) -> list[os.DirEntry[str]]:
        entries: list[os.DirEntry[str]] = []
        try:
            with os.scandir(directory) as listing:
                for entry in listing:
                    self._entries += 1
                    if self._entries > _MAX_ENTRIES:
                        break
                    entries.append(entry)
        except OSError:
            pass
        return sorted(entries, key=lambda entry: entry.name)


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
