"""Opening the database file: private modes, WAL, and the pragmas every connection needs."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
from pathlib import Path
from typing import Final

log = logging.getLogger("zodex.gateway")

SEGMENTS_DIR: Final = "output"  # beside the database: command output (segments.py)

DB_NAME: Final = "history.sqlite3"
SIDECARS: Final = ("-wal", "-shm")
DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
# How long a checkpoint waits for another process's readers before leaving the WAL as it
# is; the store's callers wait meanwhile.
CHECKPOINT_BUSY_MS: Final = 250
INCREMENTAL: Final = 2  # PRAGMA auto_vacuum
# Free pages given back per transaction (8 MiB of 4 KiB pages): moving pages holds the
# write lock, so a large trim gives them back in steps, checkpointing in between.
VACUUM_STEP_PAGES: Final = 2048
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


def _make_parents(directory: Path) -> None:
    """Make the missing ancestors of ``directory`` (as ``mkdir -p`` would, under the umask),
    each with its owner's own ``rwx`` added back: a umask such as ``0o277`` would otherwise
    leave a new parent its owner cannot create the next directory in."""
    missing = [parent for parent in directory.parents if not parent.exists()]
    for parent in reversed(missing):
        try:
            parent.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs, left as it is
        os.chmod(parent, stat.S_IMODE(parent.stat().st_mode) | stat.S_IRWXU)


def prepare_directory(directory: Path) -> None:
    _make_parents(directory)
    try:
        directory.mkdir(mode=DIR_MODE)
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
        # Takes effect only on a new file, and must come before WAL mode writes its first
        # page; an older file is switched once by its runtime (HistoryStore).
        if int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0:
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            log.warning("history %s is not in WAL mode (%s); it may be read-only", path, mode)
        conn.execute("PRAGMA synchronous = NORMAL")
        # Debian's SQLite zeroes every freed page (secure_delete=ON), so trimming 16 MiB of
        # output would write 16 MiB of zeros to the WAL. FAST still clears freed cells in
        # pages it writes anyway, and trimming gives the freed pages back at once
        # (incremental vacuum), so old content does not linger in the file.
        conn.execute("PRAGMA secure_delete = FAST")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        for suffix in SIDECARS:
            _tighten(path.with_name(path.name + suffix), FILE_MODE)
    except BaseException:
        conn.close()
        raise
    return conn


def vacuum_step(conn: sqlite3.Connection) -> tuple[int, int]:
    """Give up to :data:`VACUUM_STEP_PAGES` free pages back to the file system (live pages
    from the end of the file move into the holes); returns (pages freed, bytes still free).
    Outside any transaction; raises sqlite3.Error."""
    before = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    if before:
        # The pragma frees one page per step of its statement; a script runs it to the end.
        conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_STEP_PAGES});")
    after = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return before - after, after * page


def checkpoint(conn: sqlite3.Connection, *, busy_timeout_ms: int) -> bool:
    """Copy the WAL into the database and truncate it to nothing; False when a reader in
    another process holds it. Raises sqlite3.Error."""
    conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_BUSY_MS}")
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]) == 0
    finally:
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")


def is_incremental(conn: sqlite3.Connection) -> bool:
    return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == INCREMENTAL


def make_incremental(conn: sqlite3.Connection) -> None:
    """Switch a file made without auto-vacuum: one VACUUM, which rewrites the whole file
    (through the WAL, then checkpointed). Raises sqlite3.Error."""
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def counted_files(directory: Path) -> tuple[str, ...]:
    """The files :func:`disk_bytes` counts: the database file and its WAL (the shared-memory
    index is a fixed 32 KiB and not counted). Named once, as strings: the size is looked at
    after every write, and building the paths cost as much as the two ``stat`` calls."""
    return tuple(str(directory / f"{DB_NAME}{suffix}") for suffix in ("", "-wal"))


def disk_bytes(files: tuple[str, ...]) -> int:
    """What the :func:`counted_files` take on disk."""
    total = 0
    for name in files:
        try:
            total += os.stat(name).st_size
        except FileNotFoundError:
            pass
    return total


def clear_history(directory: Path) -> int:
    """Delete the history database with its WAL and shared-memory files, and the output
    segments; how many files were removed.

    Only for a store nobody has open (`zodex local history clear` refuses while Local runs).
    """
    removed = 0
    for suffix in ("", "-wal", "-shm"):
        path = directory / f"{DB_NAME}{suffix}"
        if path.exists():
            path.unlink()
            removed += 1
    segments = directory / SEGMENTS_DIR
    if segments.is_dir() and not segments.is_symlink():
        for path in segments.iterdir():
            path.unlink()
            removed += 1
        segments.rmdir()
    return removed
