"""The public result types of apply_patch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Operation = Literal["created", "edited", "deleted", "renamed"]


@dataclass(frozen=True)
class FileEvidence:
    """What one applied file operation did, for history and later display."""

    operation: Operation
    path: str  # absolute path (the destination for a rename)
    old_path: str | None  # absolute source path for a rename, else None
    added: int  # lines added
    removed: int  # lines removed
    diff: tuple[str, ...]  # unified diff rows, bounded (see diff.MAX_DIFF_ROWS)


@dataclass(frozen=True)
class PatchOutcome:
    ok: bool  # False => the tool result is isError: true
    text: str  # the result text of docs/apply_patch.md#results
    files: tuple[FileEvidence, ...]  # evidence for each file operation that was applied
