"""``PR_SET_NO_NEW_PRIVS`` for this process and everything it starts (docs/sprite.md#privilege-separation).

Set by Sprite's and a fleet host's root helper before it starts any worker: from then on no
execve of the helper's descendants — the agent's workers and every command they run — can
gain a privilege, through a setuid or setgid program or file capabilities, however the
service was started (a systemd unit's ``NoNewPrivileges=yes`` is not needed for it). The
flag is inherited across fork and execve and can never be cleared.
"""

from __future__ import annotations

import ctypes
import os
from typing import Final

PR_SET_NO_NEW_PRIVS: Final = 38
PR_GET_NO_NEW_PRIVS: Final = 39


def _prctl(option: int, value: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    prctl.restype = ctypes.c_int
    result: int = prctl(option, value, 0, 0, 0)
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def forbid_new_privileges() -> None:
    """Set the flag for this process (and so for all it will start); OSError if the kernel refuses."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def new_privileges_forbidden() -> bool:
    return _prctl(PR_GET_NO_NEW_PRIVS, 0) == 1
