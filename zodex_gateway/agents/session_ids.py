"""``Mcp-Session-Id`` values the gateway can check without remembering them
(docs/agents.md#identity).

An HTTP client that opens a conversation with ``initialize`` gets an id made of a random
part and a MAC of it under the session key, a secret kept in a ``0600`` file in the state
directory (docs/security.md#secrets). Any gateway holding that key — after a restart, or
another one sharing the state — recognises the id, so a conversation keeps its agent, and
no table of sessions exists to grow, expire or lose. An id the key did not sign, in any
shape, is refused (HTTP 404, as the MCP spec answers an unknown session).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from pathlib import Path
from typing import Final

from zodex_system.private_dirs import make_private_dirs
from zodex_system.secret_files import create_secret_file, read_secret_file

# "z1." + 32 hex (the random part) + "." + 32 hex (HMAC-SHA256 of it, first 128 bits).
_RANDOM_BYTES: Final = 16
_MAC_BYTES: Final = 16
_PREFIX: Final = "z1."
SESSION_ID_CHARS: Final = len(_PREFIX) + 2 * _RANDOM_BYTES + 1 + 2 * _MAC_BYTES
_SHAPE: Final = re.compile(rf"z1\.([0-9a-f]{{{2 * _RANDOM_BYTES}}})\.([0-9a-f]{{{2 * _MAC_BYTES}}})")
# What the MAC covers besides the random part: an id is never a MAC made for something else.
_DOMAIN: Final = b"zodex mcp-session-id v1\x00"

KEY_HEX_CHARS: Final = 64  # a 256-bit key, kept as text so the redaction registry can follow it
_KEY_SHAPE: Final = re.compile(rf"[0-9a-f]{{{KEY_HEX_CHARS}}}")


class SessionIds:
    """Issues ids and recognises them again; holds the key, nothing else."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def ephemeral(cls) -> SessionIds:
        """A key of this process only: its ids stop working when it ends."""
        return cls(secrets.token_bytes(KEY_HEX_CHARS // 2))

    def issue(self) -> str:
        random_part = secrets.token_hex(_RANDOM_BYTES)
        return f"{_PREFIX}{random_part}.{self._mac(random_part)}"

    def verify(self, value: str) -> bool:
        """True only for an id this key signed; any other value, of any length, is False."""
        if len(value) != SESSION_ID_CHARS:
            return False
        match = _SHAPE.fullmatch(value)
        if match is None:
            return False
        return hmac.compare_digest(match.group(2), self._mac(match.group(1)))

    def _mac(self, random_part: str) -> str:
        digest = hmac.new(self._key, _DOMAIN + random_part.encode("ascii"), hashlib.sha256).digest()
        return digest[:_MAC_BYTES].hex()


class BadSessionKey(Exception):
    """The key file exists but does not hold a key; one line naming it."""


def load_or_create_session_ids(path: Path) -> SessionIds:
    """The ids signed by the key in ``path``, made (``0600``, 64 hex characters) if there is
    none yet. Refused with one line: an unsafe directory
    (:class:`~zodex_system.private_dirs.UnsafeDirectory`), a file that is not a regular file
    of the user's own with no group or other bits
    (:class:`~zodex_system.secret_files.UnsafeSecretFile`), or one that holds anything but a
    key (:class:`BadSessionKey`)."""
    # Its directory (the state's runtime/) private like every one holding a secret; the
    # state directory above it checked too (docs/security.md#state-directories).
    make_private_dirs([path.parent], path.parent.parent)
    if not path.exists():
        try:
            create_secret_file(path, (secrets.token_hex(KEY_HEX_CHARS // 2) + "\n").encode())
        except FileExistsError:
            pass  # made meanwhile by another gateway: that one is the key
    text = read_secret_file(path).decode("ascii", "replace").strip()
    if not _KEY_SHAPE.fullmatch(text):
        raise BadSessionKey(
            f"{path} does not hold a session key ({KEY_HEX_CHARS} hex characters): remove it and "
            "a new one is made (session ids issued under the old key stop working)"
        )
    return SessionIds(bytes.fromhex(text))
