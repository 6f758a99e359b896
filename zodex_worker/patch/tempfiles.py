"""The temporary files a patch writes beside its targets (docs/apply_patch.md#files).

A temporary file is named ``.<name>.<pid>-<start>-<random>.zodex-tmp``: the writer's pid
and start time say whose it is, so a writer that died mid-write (SIGKILL, power loss of a
process, an OOM kill) leaves a file the next patch in that directory recognises as an
orphan and removes. A file whose writer still runs is never touched.

It is created with the permission bits the target will have, so it never shows another
user more than the target does, not even mid-write or as a leftover.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import secrets
from collections.abc import Iterator

from zodex_system import proctree

SUFFIX = ".zodex-tmp"
_MAX_STEM = 80  # keeps the temporary name under NAME_MAX even for long file names
_NAME = re.compile(r"\A\..*\.(\d{1,10})-(\d{1,20})-[0-9a-f]{12}" + re.escape(SUFFIX) + r"\Z", re.DOTALL)

# Directories already swept during the current apply_patch call: a 30-file patch in one
# large directory lists it once, not 30 times.
_swept: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("zodex_patch_swept", default=None)


@contextlib.contextmanager
def sweep_once_per_directory() -> Iterator[None]:
    """Within this block :func:`sweep` lists each directory at most once."""
    token = _swept.set(set())
    try:
        yield
    finally:
        _swept.reset(token)


def writer_tag() -> str:
    """``<pid>-<start time>`` of this process (start 0 where it cannot be read)."""
    pid = os.getpid()
    return f"{pid}-{proctree.start_time(pid) or 0}"


def create(directory: str, name: str, mode: int) -> tuple[int, str]:
    """Create a new, empty temporary file for ``name`` in ``directory``; (fd, path).

    ``mode`` goes to open(2), so the process umask can only remove bits from it.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    tag = writer_tag()
    while True:
        tmp = os.path.join(directory, f".{name[:_MAX_STEM]}.{tag}-{secrets.token_hex(6)}{SUFFIX}")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue  # 48 random bits collided; pick another name


def sweep(directory: str) -> None:
    """Remove the temporary files in ``directory`` (not below it) whose writer is gone.

    Best effort: a file we may not remove (another user's, in a sticky directory) stays.
    """
    swept = _swept.get()
    if swept is not None:
        if directory in swept:
            return
        swept.add(directory)
    try:
        entries = os.scandir(directory)
    except OSError:
        return
    with entries:
        for entry in entries:
            if not entry.name.endswith(SUFFIX):
                continue
            match = _NAME.match(entry.name)
            if match is None or not _writer_gone(int(match[1]), int(match[2])):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    os.unlink(entry.path)
            except OSError:
                pass


def _writer_gone(pid: int, start: int) -> bool:
    if proctree.HAVE_PROC:
        return not proctree.is_alive(pid, start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # EPERM: a process of another user has that pid
    return False
