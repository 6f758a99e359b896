"""Reading and atomically writing the text files a patch touches (docs/apply_patch.md#files)."""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass

UTF8_BOM = b"\xef\xbb\xbf"
_TMP_SUFFIX = ".zodex-tmp"
_MAX_TMP_STEM = 80  # keeps the temporary name under NAME_MAX even for long file names


class FileOpError(Exception):
    """A file operation that cannot be done; ``str(error)`` is the user-facing reason."""


@dataclass(frozen=True)
class TextFile:
    lines: list[str]  # without line terminators and without the BOM
    crlf: bool
    bom: bool
    mode: int  # permission bits to keep when the file is rewritten


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
    return TextFile(lines=lines, crlf=crlf, bom=bom, mode=stat.S_IMODE(st.st_mode))


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


def atomic_write(path: str, data: bytes, mode: int | None) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place.

    Readers see the old file or the new one, never a mix. `mode` None means a new file:
    the temporary file is created 0o666 so the process umask applies, as for open().
    The data is not fsynced: the guarantee is against our own failures and concurrent
    readers, not power loss (the same trade-off git makes by default).
    """
    directory, name = os.path.split(path)
    fd, tmp = _create_temp(directory, name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _create_temp(directory: str, name: str) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = os.path.join(directory, f".{name[:_MAX_TMP_STEM]}.{secrets.token_hex(6)}{_TMP_SUFFIX}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue  # 48 random bits collided; pick another name
