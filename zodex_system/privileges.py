"""No new privileges for a process and everything it starts (``PR_SET_NO_NEW_PRIVS``)."""

from __future__ import annotations

import ctypes
import os
from typing import Final

PR_SET_NO_NEW_PRIVS: Final = 38
PR_GET_NO_NEW_PRIVS: Final = 39


def forbid_new_privileges() -> None:
    """From now on neither this process nor any process it starts gains privileges by
    ``execve``: setuid and setgid bits and file capabilities are ignored. The flag is
    inherited and cannot be cleared."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(errno)}")


def new_privileges_forbidden() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
