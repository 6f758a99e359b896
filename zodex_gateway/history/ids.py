"""Identifiers: agent ids for people to read, invocation ids that sort by time."""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

AGENT_ID_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz0123456789"
AGENT_ID_LENGTH: Final = 4
# Crockford's base32, lower case: no i, l, o, u to misread when typed into --id.
_BASE32: Final = "0123456789abcdefghjkmnpqrstvwxyz"
_TIME_DIGITS: Final = 9  # 45 bits of milliseconds: sortable until the year 3084
_RANDOM_DIGITS: Final = 4


def new_agent_id() -> str:
    return "".join(secrets.choice(AGENT_ID_ALPHABET) for _ in range(AGENT_ID_LENGTH))


def new_invocation_id(now: float) -> str:
    """13 characters: time in ms then 20 random bits, so ids sort by start time."""
    ms = max(0, int(now * 1000))
    digits = []
    for _ in range(_TIME_DIGITS):
        ms, rem = divmod(ms, 32)
        digits.append(_BASE32[rem])
    stamp = "".join(reversed(digits))
    return stamp + "".join(secrets.choice(_BASE32) for _ in range(_RANDOM_DIGITS))


def key_hash(identity_key: str) -> str:
    """What is stored instead of an identity key (provider session keys are secrets)."""
    return hashlib.sha256(identity_key.encode("utf-8", "surrogatepass")).hexdigest()
