"""``zodex`` as a person can type it: the absolute path this program was started from.

Commands Zodex prints for a person to paste (``… local start``, ``… local stop``, the
client entries of ``mcp-config``) must run as printed, also right after
``./scripts/setup.sh && .venv/bin/zodex local start`` when ``zodex`` is not on ``PATH``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

PROGRAM = "zodex"


def zodex_path() -> str:
    """The absolute path of the ``zodex`` that runs now (``sys.argv[0]``); else the one
    installed beside this Python (the runtime daemon, tests); else the one on ``PATH``."""
    started_as = sys.argv[0] if sys.argv else ""
    if os.path.basename(started_as) == PROGRAM and os.access(started_as, os.X_OK):
        return os.path.abspath(started_as)
    beside = Path(sys.executable).parent / PROGRAM
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(PROGRAM)
    return os.path.abspath(found) if found else PROGRAM


def zodex_command(*args: str) -> str:
    """A command line for a shell: ``/abs/path/zodex local start`` (quoted where needed)."""
    return shlex.join([zodex_path(), *args])
