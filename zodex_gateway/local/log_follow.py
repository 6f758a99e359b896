"""``zodex local logs --follow``: the end of ``runtime.log``, then each line as it is written
(:mod:`zodex_system.log_follow`, shared with ``zodex sprite logs --follow``), its errors as
:class:`LocalError`. It keeps following across ``zodex local stop`` and ``start``, which
append to the same file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from zodex_gateway.local.lifecycle import LocalError
from zodex_system import log_follow


def follow(path: Path, lines: int, emit: Callable[[str], None], stop_fd: int | None = None) -> None:
    try:
        log_follow.follow(
            path, lines, emit, stop_fd, missing_hint=" (has Zodex Local been set up and started?)"
        )
    except log_follow.FollowError as exc:
        raise LocalError(str(exc)) from exc
