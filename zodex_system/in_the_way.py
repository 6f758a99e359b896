"""Clearing a name for a file this process is about to make, in a directory another account
may write (in Sprite the agent can write the registry directory): whatever stands there — a
file, a link, an empty directory, planted or left by an earlier holder — goes first.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def clear(path: Path) -> bool:
    """Remove what is at ``path``; True when nothing is there now. A link is unlinked, never
    its target; a directory goes only if empty; what cannot be removed stays (False)."""
    try:
        path.unlink(missing_ok=True)
        return True
    except IsADirectoryError:
        with contextlib.suppress(OSError):
            path.rmdir()
            return True
    except OSError:
        pass
    return not os.path.lexists(path)
