"""Files only their owner may read (``0600``): every token, bearer and key Zodex keeps, and
the tombstones a worker leaves. One writer, so each of them is written the same safe way.

A file is written to a fresh temporary file beside it, opened ``O_CREAT|O_EXCL|O_NOFOLLOW``
with mode ``0600``: it is never a file that was there before, nor a link planted in its
place, and it is born private (no chmod afterwards, so never readable by others for a
moment). It is then put in place in one step, so a reader sees the old content or the new,
never a part: :func:`write_secret_file` renames it over the old file;
:func:`create_secret_file` links it under the final name, which fails if that name exists.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_secret_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (``0600``), replacing what was there, atomically."""
    _put(path, data, replace=True)


def create_secret_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` (``0600``), atomically; FileExistsError if
    ``path`` exists (even as a dangling link)."""
    _put(path, data, replace=False)


def _put(path: Path, data: bytes, *, replace: bool) -> None:
    # A random name: two writers of one file (two threads, a stale temp file of a crashed
    # writer) never share a temporary file.
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temp, _FLAGS, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())  # the name never points at an empty file after a crash
        if replace:
            os.replace(temp, path)
        else:
            os.link(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)  # gone after a rename; the extra name after a link
