"""Identifiers: agent ids for people to read, invocation ids that sort by time."""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

AGENT_ID_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz0123456789"
AGENT_ID_LENGTH: Final = 4
# Where an agent id is a filter (the observer API, `zodex local history --agent`), this
# word selects the calls that have no agent; so it is never issued as an agent's id.
NO_AGENT: Final = "none"
# Crockford's base32, lower case: no i, l, o, u to misread when typed into --id.
_BASE32: Final = "0123456789abcdefghjkmnpqrstvwxyz"
_TIME_DIGITS: Final = 9  # 45 bits of milliseconds: sortable until the year 3084
_RANDOM_DIGITS: Final = 4


def new_agent_id() -> str:
    while True:
        agent_id = "".join(secrets.choice(AGENT_ID_ALPHABET) for _ in range(AGENT_ID_LENGTH))
        if agent_id != NO_AGENT:
            return agent_id


def agent_matches(wanted: str | None, agent_id: str | None) -> bool:
    """Whether a call of ``agent_id`` (None: no agent) passes the filter ``wanted``
    (None: every call; :data:`NO_AGENT`: the calls with no agent)."""
    if wanted is None:
        return True
    return agent_id is None if wanted == NO_AGENT else agent_id == wanted


# Every pair of digits, so that an id is seven look-ups instead of thirteen.
_PAIRS: Final = tuple(high + low for high in _BASE32 for low in _BASE32)


def new_invocation_id(now: float) -> str:
    """13 characters: time in ms then 20 random bits, so ids sort by start time."""
    ms = max(0, int(now * 1000))
    # One draw of the random bits (each secrets.choice is a read of the OS's random source).
    value = (ms << (5 * _RANDOM_DIGITS)) | secrets.randbits(5 * _RANDOM_DIGITS)
    digits = _TIME_DIGITS + _RANDOM_DIGITS  # odd: the first pair's high digit is dropped
    pairs = "".join([_PAIRS[(value >> (10 * i)) & 1023] for i in reversed(range((digits + 1) // 2))])
    return pairs[-digits:]


def key_hash(identity_key: str) -> str:
    """What is stored instead of an identity key (provider session keys are secrets)."""
    return hashlib.sha256(identity_key.encode("utf-8", "surrogatepass")).hexdigest()
