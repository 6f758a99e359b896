"""Sprite's MCP key (docs/sprite.md#the-service): the capability a client presents as
``?key=`` or ``Authorization: Bearer``. One file, ``0600``, owned by the service account;
the agent account must never be able to read it.

A key that anyone could guess is refused before the service starts: missing, empty, short,
default-looking (the words operators paste from examples) or all one character. So is a key
file another account can read, or one that is a link, or not a regular file, since then the
key is no longer a secret of the service.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from pathlib import Path

MIN_KEY_CHARS = 32
# Far more than any key; a key file that is larger is not a key (and is not read whole).
MAX_KEY_FILE_BYTES = 4096
# Words of example configurations; a key containing one was pasted, not made.
DEFAULT_WORDS = ("changeme", "secret", "password")
# URL-safe and unreserved (RFC 3986): the key travels unquoted in ``?key=``.
_KEY_CHARS = re.compile(r"[A-Za-z0-9._~-]+")


class KeyRefused(Exception):
    """The key file cannot serve as the service's key; one line saying why and how to fix it."""


def new_key() -> str:
    """A fresh key: 256 random bits, URL-safe (43 characters)."""
    return secrets.token_urlsafe(32)


def read_key(path: Path, owner_uid: int | None = None) -> str:
    """The key in ``path``, or :class:`KeyRefused`. With ``owner_uid``, the file must belong
    to that account or to root."""
    fix = "run zodex sprite rotate-key"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise KeyRefused(f"no key file at {path}: {fix} (or zodex sprite setup)") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the final component is a symbolic link
            raise KeyRefused(f"key file {path} is a symbolic link: {fix}") from None
        raise KeyRefused(f"cannot read key file {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyRefused(f"key file {path} is not a regular file: {fix}")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise KeyRefused(
                f"key file {path} can be read by other accounts (mode {stat.S_IMODE(info.st_mode):04o}): "
                f"the key is no longer secret; {fix}"
            )
        if owner_uid is not None and info.st_uid not in (owner_uid, 0):
            raise KeyRefused(f"key file {path} is owned by uid {info.st_uid}, not the service account: {fix}")
        data = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyRefused(f"key file {path} is larger than {MAX_KEY_FILE_BYTES} bytes: {fix}")
    try:
        key = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise KeyRefused(f"key file {path} is not UTF-8 text: {fix}") from None
    check_key(key, path)
    return key


def check_key(key: str, path: Path) -> None:
    """Raise :class:`KeyRefused` unless ``key`` (read from ``path``) is fit to guard the service."""
    fix = "run zodex sprite rotate-key"
    if not key:
        raise KeyRefused(f"key file {path} is empty: {fix}")
    if not _KEY_CHARS.fullmatch(key):
        raise KeyRefused(
            f"key in {path} has characters that are not URL-safe (allowed: A-Z a-z 0-9 . _ ~ -): {fix}"
        )
    if len(key) < MIN_KEY_CHARS:
        raise KeyRefused(f"key in {path} is shorter than {MIN_KEY_CHARS} characters: {fix}")
    folded = re.sub(r"[._~-]", "", key.lower())
    if len(set(key)) == 1 or any(word in folded for word in DEFAULT_WORDS):
        raise KeyRefused(f"key in {path} looks like a default, not a secret: {fix}")


def write_key(path: Path, key: str, owner_uid: int, owner_gid: int) -> None:
    """Write ``key`` to ``path`` atomically, ``0600``, owned by ``owner_uid:owner_gid``.

    The temporary file is born ``0600`` and chowned before it gets the final name, so the
    key is never readable by anyone but its owner (and root), not even for a moment; a
    reader (the running service) sees the old key or the new one, never a part.
    """
    check_key(key, path)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchown(out.fileno(), owner_uid, owner_gid)
            out.write((key + "\n").encode())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
