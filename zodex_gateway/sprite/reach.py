"""Whether the service account can still import the Zodex that runs now.

``zodex sprite serve`` starts as root and drops to the service account before it serves.
Python imports lazily (the first tool call loads ``concurrent.futures.thread``, for one),
so every directory this Python imports from must stay readable after the drop; a pyenv
build or a venv under root's ``0700`` home is not, and the service would fail on its first
call instead of at start. The check reads path modes only (no subprocess, a few ``stat``
calls): ACLs and capabilities are not considered.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Collection, Iterable
from pathlib import Path

READ, SEARCH = 4, 1


def _allows(info: os.stat_result, uid: int, gids: Collection[int], wanted: int) -> bool:
    if info.st_uid == uid:
        bits = info.st_mode >> 6
    elif info.st_gid in gids:
        bits = info.st_mode >> 3
    else:
        bits = info.st_mode
    return bits & wanted == wanted


def blocked_at(path: Path, uid: int, gids: Collection[int]) -> tuple[Path, int] | None:
    """The first directory on the way to ``path`` (or ``path`` itself) that the account
    cannot pass or read, with its mode; None when it can read ``path``. Links are followed
    as the kernel follows them, so both the path as given and its target are checked."""
    for candidate in dict.fromkeys((path.absolute(), Path(os.path.realpath(path)))):
        for directory in reversed(candidate.parents):
            info = os.stat(directory)
            if not _allows(info, uid, gids, SEARCH):
                return directory, stat.S_IMODE(info.st_mode)
        info = os.stat(candidate)
        wanted = READ | SEARCH if stat.S_ISDIR(info.st_mode) else READ
        if not _allows(info, uid, gids, wanted):
            return candidate, stat.S_IMODE(info.st_mode)
    return None


def import_roots() -> list[Path]:
    """Where this Python imports from: ``sys.path`` (the standard library, its extension
    modules, site-packages) and the directory of Zodex's own packages (an editable install
    finds them outside ``sys.path``)."""
    roots = [Path(entry) for entry in sys.path if entry and os.path.exists(entry)]
    roots.append(Path(__file__).resolve().parents[2])
    return list(dict.fromkeys(roots))


def unreadable_import_root(
    uid: int, gids: Collection[int], roots: Iterable[Path] | None = None
) -> tuple[Path, Path, int] | None:
    """``(import root, blocking path, its mode)`` for the first root the account cannot
    read, or None when it can read them all."""
    for root in import_roots() if roots is None else roots:
        try:
            blocked = blocked_at(root, uid, gids)
        except FileNotFoundError:
            continue  # gone since sys.path was set: nothing to import from there
        if blocked is not None:
            return root, *blocked
    return None
