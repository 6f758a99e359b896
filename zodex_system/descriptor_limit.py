"""The open-files limit of a listening process (docs/modes.md#http-listeners).

A listener raises its soft ``RLIMIT_NOFILE`` to the hard limit at start: the usual soft
1024 is far below what a loaded listener needs, and only the hard limit is the
administrator's decision. Its children — workers, and through them every command — get the
soft limit back: a command must see the machine's usual limit (some programs size tables by
it, or still use ``select()``).
"""

from __future__ import annotations

import logging
import resource
from typing import Final

log = logging.getLogger("zodex.gateway")

# Without a hard limit (RLIM_INFINITY) the kernel still caps descriptors at fs.nr_open;
# this is its usual default.
UNLIMITED_TARGET: Final = 1 << 20

_inherited: list[tuple[int, int]] = []  # the limit this process started with, once raised


def raise_to_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        log.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
        return
    if not _inherited:
        _inherited.append((soft, hard))


def give_back(pid: int) -> None:
    """Give child ``pid`` the soft limit this process started with. Called right after the
    spawn: a worker starts no command before it has said READY."""
    if not _inherited:
        return
    soft, _hard = _inherited[0]
    try:
        hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    except (OSError, ValueError) as exc:
        log.warning("could not give process %d the usual open-files limit: %s", pid, exc)
