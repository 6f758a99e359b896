"""Secret files (``0600``): the MCP token, made fresh at each start, and the observer API's
bearer, kept across restarts until rotated."""

from __future__ import annotations

import secrets
from pathlib import Path

from zodex_system.secret_files import write_secret_file

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
    """Write a fresh bearer; a running observer accepts only it from now on."""
    return write_secret(path)


def write_secret(path: Path) -> str:
    """A fresh random secret of 64 hex characters, written atomically with mode ``0600``."""
    secret = secrets.token_hex(BEARER_CHARS // 2)
    write_secret_file(path, (secret + "\n").encode())
    return secret
