"""Files only their owner may read (``0600``): every token, bearer and key Zodex keeps, and
the tombstones a worker leaves (``0640`` in Sprite, where the service reads them through the
agent's group). One writer, so each of them is written the same safe way.

A file is written to a fresh temporary file beside it, opened ``O_CREAT|O_EXCL|O_NOFOLLOW``
with mode ``0600``: it is never a file that was there before, nor a link planted in its
place, and it is born private (no chmod afterwards, so never readable by others for a
moment). It is then put in place in one step, so a reader sees the old content or the new,
never a part: :func:`write_secret_file` renames it over the old file;
:func:`create_secret_file` links it under the final name, which fails if that name exists.

A secret kept across restarts is trusted when read, so :func:`read_secret_file` takes it
only from a regular file of the user's own that no one else may read or write
(docs/security.md#secrets): one planted by another account, or left open to one, could
hold a value that account knows.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from zodex_system.private_dirs import UnsafeDirectory, owner_name

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_READ = 64 * 1024  # every secret is far smaller


class UnsafeSecretFile(UnsafeDirectory):
    """A secret file that is not safely the user's own; one line naming it."""


def write_secret_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (``0600``), replacing what was there, atomically."""
    _put(path, data, replace=True)


def write_group_readable_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` like :func:`write_secret_file`, but readable by the file's
    group too (``0640``): a Sprite worker's tombstones, which the service (another account)
    reads through the agent's own group (docs/sprite.md#privilege-separation)."""
    _put(path, data, replace=True, mode=0o640)


def create_secret_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` (``0600``), atomically; FileExistsError if
    ``path`` exists (even as a dangling link)."""
    _put(path, data, replace=False)


def _put(path: Path, data: bytes, *, replace: bool, mode: int = 0o600) -> None:
    # A random name: two writers of one file (two threads, a stale temp file of a crashed
    # writer) never share a temporary file.
    import secrets  # here: the stdio bridge reads secret files and must start fast

    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temp, _FLAGS, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            if mode != 0o600:
                os.fchmod(fd, mode)  # exactly this mode, whatever the umask; still empty
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


def read_secret_file(path: Path) -> bytes:
    """The content of the secret file ``path``, refused with :class:`UnsafeSecretFile` when it
    is not a regular file (a link is not followed), not owned by the user, or has any group
    or other permission bit; FileNotFoundError when it does not exist."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        # ELOOP: a symbolic link in the file's place.
        raise UnsafeSecretFile(
            f"{path} cannot be opened as a secret file ({exc.strerror}): remove it"
        ) from None
    try:
        _check(path, os.fstat(fd))  # the file that is read, not a name checked before
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as file:
        return file.read(_MAX_READ)


def check_secret_file(path: Path) -> None:
    """Refuse ``path`` as :func:`read_secret_file` would; nothing to refuse if it is missing."""
    try:
        read_secret_file(path)
    except FileNotFoundError:
        pass


def _check(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeSecretFile(f"{path} is not a regular file: Zodex will not use it as a secret; remove it")
    me = os.geteuid()
    if info.st_uid != me:
        raise UnsafeSecretFile(
            f"{path} is owned by {owner_name(info.st_uid)}, not by you ({owner_name(me)}): "
            "Zodex will not use it as a secret; remove it"
        )
    if info.st_mode & 0o077:
        raise UnsafeSecretFile(
            f"{path} is open to group or others (mode {stat.S_IMODE(info.st_mode):04o}): "
            "Zodex will not use it as a secret, which others may have read; remove it"
        )
