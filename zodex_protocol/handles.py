"""Session handles and worker ids: routing information a gateway can read without a table.

A handle is ``<worker id><incarnation>-<random>``:

* worker id — 7 characters ``[a-z2-7]``, a hash of the workdir's real path (so every
  gateway derives the same id for the same directory);
* incarnation — 1–2 characters base-36, the worker's restart count modulo 36², so a handle
  issued by a dead incarnation is never routed to its successor;
* random — 10 characters base-36 from the OS CSPRNG (≥ 51 bits), making handles unguessable.

At most 20 characters, ASCII alphanumerics and exactly one ``-`` (docs/sessions.md).
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass

WORKER_ID_LENGTH = 7
RANDOM_LENGTH = 10
MAX_INCARNATION = 36**2  # incarnations wrap; a crash-loop limit keeps them far from it
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_HANDLE_RE = re.compile(r"^([a-z2-7]{7})([0-9a-z]{1,2})-([0-9a-z]{10})$")


def worker_id_for(real_path: str) -> str:
    """The worker id of a workdir: a pure function of its real path."""
    digest = hashlib.blake2b(real_path.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return base64.b32encode(digest).decode("ascii").lower()[:WORKER_ID_LENGTH]


def _base36(value: int) -> str:
    if value == 0:
        return "0"
    digits = []
    while value:
        value, rem = divmod(value, 36)
        digits.append(_ALPHABET[rem])
    return "".join(reversed(digits))


@dataclass(frozen=True)
class SessionHandle:
    worker_id: str
    incarnation: int
    token: str

    def __str__(self) -> str:
        return f"{self.worker_id}{_base36(self.incarnation % MAX_INCARNATION)}-{self.token}"

    @classmethod
    def new(cls, worker_id: str, incarnation: int) -> SessionHandle:
        token = "".join(secrets.choice(_ALPHABET) for _ in range(RANDOM_LENGTH))
        return cls(worker_id, incarnation % MAX_INCARNATION, token)

    @classmethod
    def parse(cls, text: str) -> SessionHandle | None:
        """The handle's parts, or None when the text cannot be a handle."""
        match = _HANDLE_RE.match(text)
        if match is None:
            return None
        worker_id, incarnation, token = match.groups()
        return cls(worker_id, int(incarnation, 36), token)
