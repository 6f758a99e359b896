"""Opening the database file: private modes, WAL, and the pragmas every connection needs."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import Final

log = logging.getLogger("zodex.gateway")

DB_NAME: Final = "history.sqlite3"
SIDECARS: Final = ("-wal", "-shm")
DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
# The WAL file is truncated back to this after a checkpoint, so a 50 MB burst of output
# does not leave a 50 MB file behind.
JOURNAL_SIZE_LIMIT: Final = 16 * 1024 * 1024


def database_path(directory: Path) -> Path:
    return directory / DB_NAME


def _tighten(path: Path, allowed: int) -> None:
    """Drop the bits beyond ``allowed``; never add any, so a file or directory someone
    made read-only stays read-only (and history then refuses to record, as it should)."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        return
    if mode & ~allowed:
        with contextlib.suppress(PermissionError):
            os.chmod(path, mode & allowed)


def prepare_directory(directory: Path) -> None:
    try:
        directory.mkdir(mode=DIR_MODE, parents=True)
    except FileExistsError:
        _tighten(directory, DIR_MODE)
    else:
        os.chmod(directory, DIR_MODE)  # exactly, whatever the umask


def _create_private(path: Path) -> None:
    # Created here rather than by SQLite so its mode never depends on the umask; SQLite
    # gives the -wal and -shm files the mode of the database file.
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)
    os.chmod(path, FILE_MODE)


def connect(directory: Path, *, busy_timeout_s: float) -> sqlite3.Connection:
    """An open connection in WAL mode. Raises OSError or sqlite3.Error."""
    prepare_directory(directory)
    path = database_path(directory)
    _create_private(path)
    _tighten(path, FILE_MODE)
    # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE), never implied.
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            log.warning("history %s is not in WAL mode (%s); it may be read-only", path, mode)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        for suffix in SIDECARS:
            _tighten(path.with_name(path.name + suffix), FILE_MODE)
    except BaseException:
        conn.close()
        raise
    return conn


def clear_history(directory: Path) -> int:
    """Delete the history database with its WAL and shared-memory files; how many were removed.

    Only for a store nobody has open (`zodex local history clear` refuses while Local runs).
    """
    removed = 0
    for suffix in ("", "-wal", "-shm"):
        path = directory / f"{DB_NAME}{suffix}"
        if path.exists():
            path.unlink()
            removed += 1
    return removed
