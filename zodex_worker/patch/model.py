"""The parsed form of a patch: file operations and their chunks.

Line numbers are 1-based positions in the patch text as the model sent it (wrapper
lines included), so every error can point at the exact line the model wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

ItemKind = Literal[" ", "-", "+"]


class PatchSyntaxError(Exception):
    """A malformed patch; ``str(error)`` is the full user-facing message."""


@dataclass(frozen=True)
class Chunk:
    """One change inside an Update File section."""

    contexts: tuple[str, ...]  # `@@ <line>` anchors, searched one after another
    items: tuple[tuple[ItemKind, str], ...]  # the chunk's lines in patch order
    eof: bool  # `*** End of File`: the old lines must end the file
    line: int  # patch line where the chunk starts (its first @@ or first item)
    # Bare empty lines at the end of the chunk. They may be real empty context lines or
    # just spacing before the next `@@`; the matcher tries with them, then without.
    trailing_blanks: int = 0

    @property
    def old(self) -> tuple[str, ...]:
        return tuple(text for kind, text in self.items if kind != "+")

    @property
    def new(self) -> tuple[str, ...]:
        return tuple(text for kind, text in self.items if kind != "-")

    def without_trailing_blanks(self) -> Chunk:
        return replace(self, items=self.items[: len(self.items) - self.trailing_blanks], trailing_blanks=0)


@dataclass(frozen=True)
class AddFile:
    path: str
    lines: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class DeleteFile:
    path: str
    line: int


@dataclass(frozen=True)
class UpdateFile:
    path: str
    move_to: str | None
    chunks: tuple[Chunk, ...]
    line: int


Operation = AddFile | DeleteFile | UpdateFile
