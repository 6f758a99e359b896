"""Carrying out one parsed file operation: compute the new content, then write it.

Each function either finishes its operation and returns evidence, or raises
FileOpError having changed nothing (docs/apply_patch.md#files). The one exception is a move whose
source cannot be removed after the destination was written; the error says so.
"""

from __future__ import annotations

import os
import stat

from .diagnostics import describe
from .diff import rediff, splice, unified
from .lineview import LineView
from .matcher import locate
from .model import AddFile, DeleteFile, UpdateFile
from .outcome import FileEvidence
from .textfile import (
    FileOpError,
    Keep,
    atomic_write,
    decode_lines,
    describe_os_error,
    encode_lines,
    read_text,
    resolve,
    write_target,
)

_DEV_NULL = "/dev/null"


def add_file(op: AddFile, workdir: str) -> FileEvidence:
    path = resolve(workdir, op.path)
    target = write_target(path)
    if os.path.isdir(target):
        raise FileOpError(f"{path} is a directory")
    old_lines: list[str] | None = None
    keep: Keep | None = None
    if os.path.isfile(target):
        # Overwriting keeps the old file's mode bits and owner, as an edit would.
        _check_writable(target)
        keep = Keep.of(os.stat(target))
        old_lines = _lines_for_evidence(target)
    new_lines = list(op.lines)
    data = encode_lines(new_lines, crlf=False, bom=False)
    _make_parent(target)
    _write(target, data, keep)
    if old_lines is None:
        diff = unified(_DEV_NULL, path, [], new_lines, [("insert", 0, 0, 0, len(new_lines))])
    else:
        diff = unified(path, path, old_lines, new_lines, rediff(old_lines, new_lines))
    return FileEvidence("created", path, None, diff.added, diff.removed, diff.rows)


def delete_file(op: DeleteFile, workdir: str) -> FileEvidence:
    path = resolve(workdir, op.path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise FileOpError(f"{path} does not exist") from None
    except OSError as error:
        raise FileOpError(f"cannot access {path}: {describe_os_error(error)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise FileOpError(f"{path} is a directory; apply_patch deletes files only")
    old_lines = _lines_for_evidence(path) if stat.S_ISREG(st.st_mode) else []
    try:
        os.unlink(path)
    except OSError as error:
        raise FileOpError(f"cannot delete {path}: {describe_os_error(error)}") from None
    diff = unified(path, _DEV_NULL, old_lines, [], [("delete", 0, len(old_lines), 0, 0)])
    return FileEvidence("deleted", path, None, diff.added, diff.removed, diff.rows)


def update_file(op: UpdateFile, workdir: str) -> FileEvidence:
    source = resolve(workdir, op.path)
    dest = resolve(workdir, op.move_to) if op.move_to is not None else source
    original = read_text(write_target(source))
    view = LineView(original.lines)
    placements = locate(view, op.chunks)
    if not isinstance(placements, list):
        raise FileOpError(describe(placements, view, source))
    new_lines, codes = splice(original.lines, placements)
    data = encode_lines(new_lines, crlf=original.crlf, bom=original.bom)
    diff = unified(source, dest, original.lines, new_lines, codes)
    if _same_file(source, dest):
        target = write_target(source)
        _check_writable(target)
        _write(target, data, original.keep)
        return FileEvidence("edited", source, None, diff.added, diff.removed, diff.rows)
    target = write_target(dest)
    if os.path.isdir(target):
        raise FileOpError(f"cannot move to {dest}: it is a directory")
    if os.path.isfile(target):
        _check_writable(target)
    _check_removable(source)
    _make_parent(target)
    _write(target, data, original.keep)
    try:
        os.unlink(source)
    except OSError as error:
        raise FileOpError(
            f"wrote {dest} but could not remove the source {source}: {describe_os_error(error)}"
        ) from None
    return FileEvidence("renamed", dest, source, diff.added, diff.removed, diff.rows)


def _same_file(source: str, dest: str) -> bool:
    if source == dest:
        return True
    try:
        return os.path.samefile(source, dest)  # e.g. a case-insensitive file system
    except OSError:
        return False


def _lines_for_evidence(path: str) -> list[str]:
    """A file's lines for the diff of what was removed; undecodable bytes are replaced."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return []
    try:
        return decode_lines(data, path)[0]
    except FileOpError:
        return decode_lines(data.decode("utf-8", "replace").encode("utf-8"), path)[0]


def _make_parent(path: str) -> None:
    parent = os.path.dirname(path)
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise FileOpError(f"cannot create {path}: {parent} is not a directory")
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as error:
        raise FileOpError(f"cannot create the directory {parent}: {describe_os_error(error)}") from None


def _check_writable(path: str) -> None:
    """Refuse to replace a file its permissions protect from us (docs/apply_patch.md#files).

    The rename that replaces it needs only the directory, so without this check a 0444
    file would be rewritten; root passes, as for any write (a documented difference).
    """
    if not _access(path, os.W_OK):
        raise FileOpError(f"cannot write {path}: {_denial(path)}")


def _check_removable(source: str) -> None:
    """A move removes its source: check that before the destination is written."""
    directory = os.path.dirname(source)
    allowed = _access(directory, os.W_OK | os.X_OK)
    if allowed and os.geteuid() != 0:
        # In a sticky directory (/tmp) only the file's or the directory's owner may unlink.
        try:
            parent = os.stat(directory)
            owner = os.lstat(source).st_uid
        except OSError:
            parent = None
        if parent is not None and parent.st_mode & stat.S_ISVTX:
            allowed = os.geteuid() in (parent.st_uid, owner)
    if not allowed:
        raise FileOpError(f"cannot remove {source}: {_denial(directory)}")


def _access(path: str, mode: int) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(path, mode, effective_ids=True)
    return os.access(path, mode)


def _denial(path: str) -> str:
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return "Read-only file system" if read_only else "Permission denied"


def _write(path: str, data: bytes, keep: Keep | None) -> None:
    try:
        atomic_write(path, data, keep)
    except OSError as error:
        raise FileOpError(f"cannot write {path}: {describe_os_error(error)}") from None
