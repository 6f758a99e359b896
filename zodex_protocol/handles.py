"""Session handles and worker ids: routing information a gateway can read without a table.

A handle is ``<worker id><incarnation>-<random>``:

* worker id — 7 characters ``[a-z2-7]``, a hash of the workdir's real path (so every
  gateway derives the same id for the same directory);
* incarnation — 1–2 characters base-36, the worker's restart count modulo 36², so a handle
  issued by a dead incarnation is never routed to its successor;
* random — 10 characters base-36 from the OS CSPRNG (≥ 51 bits), making handles unguessable;
* host incarnation — on a fleet host only, 6 characters base-36 after the random part,
  chosen at each start of the host, so a restarted host tells its old handles (*lost*)
  from handles it never issued (docs/fleet.md#handles-across-hosts).

At most 32 characters (20 without a host incarnation), ASCII alphanumerics and exactly one
``-`` (docs/sessions.md#handles).
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass

WORKER_ID_LENGTH = 7
RANDOM_LENGTH = 10
HOST_INCARNATION_LENGTH = 6
MAX_HANDLE_CHARS = 32
MAX_INCARNATION = 36**2  # incarnations wrap; a crash-loop limit keeps them far from it
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_TOKENS = len(_ALPHABET) ** RANDOM_LENGTH  # every random part a handle can have
_HANDLE_RE = re.compile(r"^([a-z2-7]{7})([0-9a-z]{1,2})-([0-9a-z]{10})([0-9a-z]{6})?$")
_HOST_INCARNATION_RE = re.compile(r"^[0-9a-z]{6}$")


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
    host: str = ""  # the fleet host's incarnation; empty in Local and Sprite

    def __str__(self) -> str:
        return f"{self.worker_id}{_base36(self.incarnation % MAX_INCARNATION)}-{self.token}{self.host}"

    @classmethod
    def new(cls, worker_id: str, incarnation: int, host: str = "") -> SessionHandle:
        # One draw for all ten digits, each as uniform as a choice of its own: a choice
        # per character read the OS CSPRNG ten times, on every command's path.
        token = _base36(secrets.randbelow(_TOKENS)).rjust(RANDOM_LENGTH, "0")
        return cls(worker_id, incarnation % MAX_INCARNATION, token, host)

    @classmethod
    def parse(cls, text: str) -> SessionHandle | None:
        """The handle's parts, or None when the text cannot be a handle."""
        match = _HANDLE_RE.match(text)
        if match is None:
            return None
        worker_id, incarnation, token, host = match.groups()
        return cls(worker_id, int(incarnation, 36), token, host or "")


def check_host_incarnation(text: str) -> str:
    """A host incarnation as handles carry it (6 base-36 characters), or ValueError."""
    if not _HOST_INCARNATION_RE.match(text):
        raise ValueError(
            f"a host incarnation is {HOST_INCARNATION_LENGTH} characters of 0-9 a-z, got {text!r}"
        )
    return text


def new_host_incarnation(taken: set[str]) -> str:
    """A fresh host incarnation, never one in ``taken`` (the host's earlier ones)."""
    while True:
        value = "".join(secrets.choice(_ALPHABET) for _ in range(HOST_INCARNATION_LENGTH))
        if value not in taken:
            return value
