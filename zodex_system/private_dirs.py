"""Directories that hold Zodex's secrets must be the user's own (docs/security.md#state-directories).

The MCP token, the observer bearer, the runtime's signing key and its sockets live in
directories under an XDG base (``$XDG_STATE_HOME``, ``$XDG_RUNTIME_DIR``). Another account
that owns one of them, or may write into one of them or any ancestor up to that base,
could read or replace what is kept there (plant a ``discovery.json`` pointing clients at
itself, a ``config`` that runs its command). Such a tree is refused with one line naming
the directory and its owner, before anything is created or changed in it. Directories
above the base (``/tmp``, a home) are the system's and the user's business, not checked.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from collections.abc import Iterable
from pathlib import Path


class UnsafeDirectory(Exception):
    """A directory Zodex would keep secrets in is not safely the user's; one line."""


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _chain(path: Path, base: Path) -> list[Path]:
    """``base`` and each directory from it down to ``path`` (``path`` alone when it is not
    under ``base``)."""
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        return [path]
    chain = [base]
    for part in parts:
        chain.append(chain[-1] / part)
    return chain


def check_directory(directory: Path) -> bool:
    """True if ``directory`` exists and is safe; False if it does not exist; raises
    :class:`UnsafeDirectory` otherwise. Symbolic links are followed: the directory that
    is used is the one that counts."""
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UnsafeDirectory(f"cannot check {directory}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{directory} is not a directory; Zodex keeps its secrets in directories")
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        allowed = "you (root)" if me == 0 else f"you ({owner_name(me)}) or root"
        raise UnsafeDirectory(
            f"{directory} is owned by {owner_name(info.st_uid)}, not by {allowed}: "
            "Zodex will not keep secrets under it; remove it or change its owner"
        )
    if info.st_mode & 0o022:
        raise UnsafeDirectory(
            f"{directory} (owner {owner_name(info.st_uid)}) is writable by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}): Zodex will not keep secrets under it; "
            f"run chmod go-w {directory}"
        )
    return True


def check_tree(path: Path, base: Path) -> None:
    """Check every existing directory from ``base`` down to ``path``; change nothing."""
    for directory in _chain(path, base):
        if not check_directory(directory):
            return  # nothing below a missing directory exists yet


def make_private_dirs(paths: Iterable[Path], base: Path) -> None:
    """Check all of ``paths`` (and their ancestors up to ``base``) first, changing nothing
    if any is unsafe; then create what is missing with mode ``0700`` and tighten Zodex's
    own directories below ``base`` to ``0700``."""
    wanted = list(paths)
    for path in wanted:
        check_tree(path, base)
    if not base.exists():
        base.parent.mkdir(parents=True, exist_ok=True)  # above the base: the user's own layout
    for path in wanted:
        for directory in _chain(path, base):
            created = False
            with contextlib.suppress(FileExistsError):
                directory.mkdir(mode=0o700)
                created = True
            # Made meanwhile by someone else (a shared /tmp): checked again before use.
            check_directory(directory)
            if directory != base and not created:
                _tighten(directory)


def _tighten(directory: Path) -> None:
    info = os.stat(directory)
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(directory, 0o700)
