"""Turning a PTY byte stream into what the model sees (docs/output.md).

- :mod:`.cleaner` — streaming removal of escape sequences and control characters;
- :mod:`.spill` — private, size-capped spill files and their clean-up;
- :mod:`.stream` — one session's output: deltas, tail previews, spill, bounded memory.
"""

from zodex_system.terminal_text import TerminalCleaner
from zodex_worker.output.spill import SpillFile, remove_stale_spill_files
from zodex_worker.output.stream import SessionOutput

__all__ = ["SessionOutput", "SpillFile", "TerminalCleaner", "remove_stale_spill_files"]
