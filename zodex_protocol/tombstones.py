"""Tombstones: what an ended session answers, and the file an incarnation leaves them in.

A session that ended keeps answering polls of its handle for ``session.tombstone`` (an
hour by default, docs/sessions.md#after-exit). While its worker runs, the worker answers
from memory; when that incarnation exits cleanly it writes every tombstone it holds to
``w/<worker id>-<incarnation>.exit`` (:meth:`RuntimeLayout.exit_file`) and from then on a
gateway answers from that file. Both sides use this module: it owns the file's format and
the rule of the answer, so the two cannot drift.

File format (docs/protocol.md#session-handles): one msgpack map ::

    {<handle>: {"final": <the session's last result, a result body>,
                "expires_at": <unix time, float>}, ...}

``expires_at`` is wall-clock time, because the file outlives the worker's monotonic clock.
The worker writes the bytes of :func:`encode` as a private file (``0600``, atomically); in
Sprite ``0640``, for the service reads it through the agent's group, and reads it as
untrusted (no link followed, at most :data:`MAX_EXIT_FILE_BYTES`, every field checked).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgpack

from zodex_protocol.errors import ProtocolError
from zodex_protocol.layout import read_small_file
from zodex_protocol.replies import SessionResult

# Far above what an incarnation's tombstones hold (sessions × a final result each); a larger
# exit file is not read (it may be written by another account: Sprite's agent).
MAX_EXIT_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Tombstone:
    final: SessionResult  # the session's last result
    expires_at: float  # unix time


def poll_result(final: SessionResult) -> SessionResult:
    """A poll of an ended session: its final fields again, with no new output."""
    return final.without_output()


def encode(stones: Mapping[str, Tombstone]) -> bytes:
    """The bytes of an exit file holding ``stones`` (handle → tombstone)."""
    body = {
        handle: {"final": stone.final.to_body(), "expires_at": float(stone.expires_at)}
        for handle, stone in stones.items()
    }
    data: bytes = msgpack.packb(body, use_bin_type=True)
    return data


def decode(data: bytes) -> dict[str, Tombstone]:
    """The tombstones of an exit file; ValueError when it is not one."""
    try:
        body = msgpack.unpackb(data, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise ValueError(f"not a tombstone file: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError("not a tombstone file: expected a map of handles")
    stones: dict[str, Tombstone] = {}
    for handle, entry in body.items():
        if not isinstance(handle, str) or not isinstance(entry, dict):
            raise ValueError("not a tombstone file: expected handle → {final, expires_at}")
        expires_at = entry.get("expires_at")
        if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
            raise ValueError(f"tombstone of {handle}: expires_at must be a unix time")
        try:
            final = SessionResult.from_body(entry.get("final"))
        except ProtocolError as exc:
            raise ValueError(f"tombstone of {handle}: {exc.message}") from None
        stones[handle] = Tombstone(final, float(expires_at))
    return stones


def answer_from_file(path: Path, handle: str, now: float | None = None) -> SessionResult | None:
    """What a poll of ``handle`` answers from an exit file, or None — the handle is then
    unknown — when the file cannot be read, does not hold it, or its tombstone expired."""
    try:
        stone = decode(read_small_file(path, MAX_EXIT_FILE_BYTES)).get(handle)
    except (OSError, ValueError):
        return None
    if stone is None or stone.expires_at < (time.time() if now is None else now):
        return None
    return poll_result(stone.final)
