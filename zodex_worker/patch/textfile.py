"""Reading and atomically writing the text files a patch touches (docs/apply_patch.md#files)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from . import tempfiles

UTF8_BOM = b"\xef\xbb\xbf"
_SET_ID_BITS = stat.S_ISUID | stat.S_ISGID


class FileOpError(Exception):
    """A file operation that cannot be done; ``str(error)`` is the user-facing reason."""


@dataclass(frozen=True)
class Keep:
    """What a rewritten file keeps of the one it replaces."""

    mode: int  # permission bits, setuid/setgid/sticky included
    uid: int
    gid: int

    @classmethod
    def of(cls, st: os.stat_result) -> Keep:
        return cls(mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid)


@dataclass(frozen=True)
class TextFile:
    lines: list[str]  # without line terminators and without the BOM
    crlf: bool
    bom: bool
    keep: Keep  # mode and owner to keep when the file is rewritten


def resolve(workdir: str, path: str) -> str:
    """The absolute, normalised path a patch path names (absolute paths pass through)."""
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(workdir, path))


def write_target(path: str) -> str:
    """Where to write `path`: through a symlink to its target, as editors and Codex do.

    os.replace() on the link itself would swap the link for a regular file.
    """
    return os.path.realpath(path) if os.path.islink(path) else path


def describe_os_error(error: OSError) -> str:
    return error.strerror or str(error)


def read_text(path: str) -> TextFile:
    """Read a UTF-8 file, noting its line endings, BOM and mode for the rewrite."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise FileOpError(f"{path} is a directory")
        if not stat.S_ISREG(st.st_mode):
            # Reading a FIFO or a device could block the worker thread forever.
            raise FileOpError(f"{path} is not a regular file")
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise FileOpError(f"{path} does not exist") from None
    except OSError as error:
        raise FileOpError(f"cannot read {path}: {describe_os_error(error)}") from None
    lines, crlf, bom = decode_lines(data, path)
    return TextFile(lines=lines, crlf=crlf, bom=bom, keep=Keep.of(st))


def decode_lines(data: bytes, path: str) -> tuple[list[str], bool, bool]:
    """Split file bytes into lines; returns (lines, uses CRLF, has a UTF-8 BOM)."""
    bom = data.startswith(UTF8_BOM)
    try:
        text = data[len(UTF8_BOM) :].decode("utf-8") if bom else data.decode("utf-8")
    except UnicodeDecodeError as error:
        offset = error.start + (len(UTF8_BOM) if bom else 0)
        bad = data[offset]
        raise FileOpError(
            f"{path} is not valid UTF-8 text (byte 0x{bad:02x} at offset {offset}); "
            "apply_patch only edits UTF-8 files"
        ) from None
    # A file is CRLF only when every newline is CRLF, so a LF file with a stray "\r\n"
    # is not rewritten wholesale (the same rule as Codex).
    newlines = text.count("\n")
    crlf = newlines > 0 and text.count("\r\n") == newlines
    if crlf:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it is not an empty line
    return lines, crlf, bom


def encode_lines(lines: list[str], *, crlf: bool, bom: bool) -> bytes:
    """Join lines with the file's line ending; a non-empty file always ends with one."""
    newline = "\r\n" if crlf else "\n"
    text = newline.join(lines) + newline if lines else ""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise FileOpError(
            f"the new content cannot be encoded as UTF-8 ({error.reason} at character {error.start})"
        ) from None
    return UTF8_BOM + data if bom else data


def atomic_write(path: str, data: bytes, keep: Keep | None) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place.

    Readers see the old file or the new one, never a mix. `keep` None means a new file:
    the temporary file is created 0o666 so the process umask applies, as for open().
    Otherwise it has the kept permission bits from its creation on (never wider than the
    target's, even mid-write or left behind by a killed writer) and, where this process
    may give them, the kept owner and group; setuid/setgid survive only with the owner
    and group they were set for. The data is not fsynced: the guarantee is against our
    own failures and concurrent readers, not power loss (the same trade-off git makes).
    """
    directory, name = os.path.split(path)
    tempfiles.sweep(directory or ".")
    fd, tmp = tempfiles.create(directory, name, 0o666 if keep is None else keep.mode & 0o777)
    try:
        try:
            if keep is not None:
                os.fchmod(fd, keep.mode & 0o777)  # put back what the umask took, before any byte
                _give_owner(fd, keep)
            _write_all(fd, data)
            if keep is not None and keep.mode & _SET_ID_BITS:
                os.fchmod(fd, _mode_for_owner(keep, os.fstat(fd)))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _give_owner(fd: int, keep: Keep) -> None:
    """The kept owner (root only) and group (any member of it), before the data is written.

    Without this, root's patch would hand another user's file to root. A failure is not an
    error: the file is then the writer's, like any file it creates.
    """
    st = os.fstat(fd)
    uid = keep.uid if os.geteuid() == 0 and st.st_uid != keep.uid else -1
    gid = keep.gid if st.st_gid != keep.gid else -1
    if uid == -1 and gid == -1:
        return
    try:
        os.fchown(fd, uid, gid)
    except OSError:
        if uid != -1 and gid != -1:
            try:
                os.fchown(fd, -1, gid)
            except OSError:
                pass


def _mode_for_owner(keep: Keep, st: os.stat_result) -> int:
    """The kept mode, less setuid when the owner changed and setgid when the group did."""
    mode = keep.mode
    if st.st_uid != keep.uid:
        mode &= ~stat.S_ISUID
    if st.st_gid != keep.gid:
        mode &= ~stat.S_ISGID
    return mode


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
