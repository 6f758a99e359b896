"""The apply_patch engine: a pure, synchronous Codex-compatible patch applier.

See docs/apply_patch.md for the format and every behaviour the spec leaves open.
"""

from .engine import apply_patch
from .outcome import FileEvidence, PatchOutcome

__all__ = ["FileEvidence", "PatchOutcome", "apply_patch"]
