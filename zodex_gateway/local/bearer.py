"""The observer API's bearer: a secret file (``0600``) kept across restarts until rotated."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

BEARER_CHARS = 64


def read_bearer(path: Path) -> str | None:
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    return value or None


def ensure_bearer(path: Path) -> str:
    """The bearer in ``path``, made (64 hex characters, ``0600``) if there is none yet."""
    return read_bearer(path) or rotate_bearer(path)


def rotate_bearer(path: Path) -> str:
    """Write a fresh bearer atomically; a running observer accepts only it from now on."""
    bearer = secrets.token_hex(BEARER_CHARS // 2)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(bearer + "\n")
    os.replace(tmp, path)
    return bearer
