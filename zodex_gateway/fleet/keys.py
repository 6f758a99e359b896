"""The fleet's key files (docs/fleet.md#keys): CURVE key pairs, signing keys and MCP keys.

Keys are read with one set of rules on hosts and gateways: a regular file (links followed,
as Kubernetes mounts Secrets through links), nothing for other accounts, at most 4096
bytes. ``keygen`` writes them, never over an existing file.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path

import zmq
from zmq.utils import z85

from zodex_gateway.config.units import ConfigError

Z85_KEY_CHARS = 40
MAX_KEY_FILE_BYTES = 4096
SIGNING_KEY_BYTES = 32
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
_Z85 = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}", re.ASCII)


class KeyFileError(ConfigError):
    """A key file that cannot be used; one line naming it."""


def read_secret_text(path: Path, owners: set[int] | None = None) -> str:
    """The stripped text of a key file, checked: a regular file others cannot read or
    write; with ``owners``, owned by one of them."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{path} is not a regular file")
        if info.st_mode & 0o007:
            raise KeyFileError(
                f"{path} can be read by other accounts (mode {stat.S_IMODE(info.st_mode):04o}): chmod o-rwx {path}"
            )
        if owners is not None and info.st_uid not in owners:
            raise KeyFileError(f"{path} is owned by uid {info.st_uid}, not by root or the service account")
        if info.st_size > MAX_KEY_FILE_BYTES:
            raise KeyFileError(f"{path} is larger than {MAX_KEY_FILE_BYTES} bytes: not a key file")
        data = path.read_bytes()
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such key file (make it with zodex host keygen)") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise KeyFileError(f"{path} is not a z85 key of {Z85_KEY_CHARS} characters") from None


def check_z85(text: str, path: Path) -> bytes:
    """The 40 z85 characters of a key (as bytes, which is how pyzmq takes CURVE keys)."""
    if not _Z85.fullmatch(text):
        raise KeyFileError(f"{path} is not a z85 key of {Z85_KEY_CHARS} characters")
    return text.encode("ascii")


def read_z85_secret(path: Path, owners: set[int] | None = None) -> bytes:
    return check_z85(read_secret_text(path, owners), path)


def read_public_key(path: Path) -> bytes:
    """A public key: anyone may read it, so only its form is checked."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) or os.stat(path).st_size > MAX_KEY_FILE_BYTES:
            raise KeyFileError(f"{path} is not a regular file of at most {MAX_KEY_FILE_BYTES} bytes")
        text = path.read_bytes().decode("ascii", "replace").strip()
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such key file (make it with zodex host keygen)") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read: {exc.strerror}") from None
    return check_z85(text, path)


def signing_key(z85_text: bytes) -> bytes:
    """The envelope's HMAC key from its z85 form."""
    return z85.decode(z85_text)


def gateway_keys(directory: Path) -> set[bytes]:
    """The public keys of the gateways a host admits: every ``*.pub`` in ``directory``."""
    if not directory.is_dir():
        raise KeyFileError(f"{directory} is not a directory of gateway public keys (*.pub)")
    keys = {read_public_key(path) for path in sorted(directory.glob("*.pub"))}
    if not keys:
        raise KeyFileError(f"no gateway public keys (*.pub) in {directory}: no gateway could connect")
    return keys


# ---- keygen --------------------------------------------------------------------------------


def check_key_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise KeyFileError(
            f"key name {name!r} must be 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit"
        )
    return name


def _write_new(path: Path, text: str, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except FileExistsError:
        raise KeyFileError(
            f"{path} exists; keygen never overwrites a key (remove it first to replace it)"
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            os.fchmod(out.fileno(), mode)  # whatever the umask
            out.write(text + "\n")
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()  # a key cut short is no key
        raise


def keygen(directory: Path, name: str, kind: str = "curve") -> list[Path]:
    """Write a key of ``kind`` (``curve``, ``signing`` or ``mcp``) named ``name`` in
    ``directory``; the paths written. Nothing is written if any target exists."""
    check_key_name(name)
    if not directory.is_dir():
        raise KeyFileError(f"{directory} is not a directory")
    if kind == "curve":
        public, secret = zmq.curve_keypair()
        targets = [
            (directory / f"{name}.key", secret.decode(), 0o600),
            (directory / f"{name}.pub", public.decode(), 0o644),
        ]
    elif kind == "signing":
        text = z85.encode(secrets.token_bytes(SIGNING_KEY_BYTES)).decode()
        targets = [(directory / f"{name}.signing", text, 0o600)]
    elif kind == "mcp":
        targets = [(directory / f"{name}.mcp", secrets.token_urlsafe(32), 0o600)]
    else:
        raise ValueError(kind)
    for path, _text, _mode in targets:
        if os.path.lexists(path):
            raise KeyFileError(
                f"{path} exists; keygen never overwrites a key (remove it first to replace it)"
            )
    written: list[Path] = []
    for path, text, mode in targets:
        try:
            _write_new(path, text, mode)
        except OSError as exc:
            for done in written:  # never half a pair
                with contextlib.suppress(OSError):
                    done.unlink()
            raise KeyFileError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    return written
