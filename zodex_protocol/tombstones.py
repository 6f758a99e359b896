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

Finding one handle's tombstone never decodes the whole file: the top map (at most
:data:`MAX_TOMBSTONES` entries) has its keys read one by one (each a string of at most :data:`MAX_HANDLE_BYTES`), every other entry skipped without
building it, and only the wanted entry decoded, within :data:`ENTRY_VALUES` values
(:mod:`zodex_protocol.bounded`). The gateway does it off its event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgpack

from zodex_protocol.bounded import unpack_bounded
from zodex_protocol.errors import ProtocolError
from zodex_protocol.layout import read_small_file
from zodex_protocol.replies import SessionResult

# Far above what an incarnation's tombstones hold (sessions × a final result each); a larger
# exit file is not read (it may be written by another account: Sprite's agent).
MAX_EXIT_FILE_BYTES = 64 * 1024 * 1024
MAX_HANDLE_BYTES = 64  # a handle is at most 32 characters of ASCII
# An exit file holds at most this many tombstones, the latest to expire; a file with more
# is not one (reading each handle costs the gateway a little time).
MAX_TOMBSTONES = 65_536
# A tombstone is one result body: a few maps and a few dozen fields.
ENTRY_VALUES = 1024


@dataclass(frozen=True)
class Tombstone:
    final: SessionResult  # the session's last result
    expires_at: float  # unix time


def poll_result(final: SessionResult) -> SessionResult:
    """A poll of an ended session: its final fields again, with no new output."""
    return final.without_output()


def encode(stones: Mapping[str, Tombstone]) -> bytes:
    """The bytes of an exit file holding ``stones`` (handle → tombstone), at most
    :data:`MAX_TOMBSTONES` of them: those that expire last."""
    kept = sorted(stones.items(), key=lambda item: item[1].expires_at, reverse=True)[:MAX_TOMBSTONES]
    body = {
        handle: {"final": stone.final.to_body(), "expires_at": float(stone.expires_at)}
        for handle, stone in kept
    }
    data: bytes = msgpack.packb(body, use_bin_type=True)
    return data


def _entries(data: bytes) -> Iterator[tuple[str, Callable[[], Tombstone], Callable[[], None]]]:
    """Each entry of an exit file as (handle, decode it, skip it); one of the two must be
    called before the next entry. ValueError when the file is not one."""
    unpacker = msgpack.Unpacker(
        raw=False,
        max_buffer_size=max(len(data), 1),
        max_str_len=MAX_HANDLE_BYTES,
        max_bin_len=0,
        max_array_len=0,
        max_map_len=0,
        max_ext_len=0,
    )
    unpacker.feed(data)
    try:
        count = unpacker.read_map_header()
    except Exception:  # msgpack raises several unrelated types on bad input
        raise ValueError("not a tombstone file: expected a map of handles") from None
    if count > MAX_TOMBSTONES:
        raise ValueError(f"not a tombstone file: more than {MAX_TOMBSTONES} handles")
    for _ in range(count):
        try:
            handle = unpacker.unpack()
        except Exception:
            raise ValueError("not a tombstone file: a handle is not a short string") from None
        if not isinstance(handle, str):
            raise ValueError("not a tombstone file: a handle is not a string")
        start = unpacker.tell()

        def skip() -> None:
            try:
                unpacker.skip()
            except Exception:
                raise ValueError("not a tombstone file: an entry is cut short") from None

        def read(handle: str = handle, start: int = start) -> Tombstone:
            skip()
            return _tombstone(handle, unpack_bounded(memoryview(data)[start : unpacker.tell()], ENTRY_VALUES))

        yield handle, read, skip


def _tombstone(handle: str, entry: object) -> Tombstone:
    if not isinstance(entry, dict):
        raise ValueError("not a tombstone file: expected handle → {final, expires_at}")
    expires_at = entry.get("expires_at")
    if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
        raise ValueError(f"tombstone of {handle}: expires_at must be a unix time")
    try:
        final = SessionResult.from_body(entry.get("final"))
    except ProtocolError as exc:
        raise ValueError(f"tombstone of {handle}: {exc.message}") from None
    return Tombstone(final, float(expires_at))


def decode(data: bytes) -> dict[str, Tombstone]:
    """Every tombstone of an exit file; ValueError when it is not one."""
    return {handle: read() for handle, read, _skip in _entries(data)}


def find(data: bytes, handle: str) -> Tombstone | None:
    """The tombstone of ``handle`` in an exit file, decoding no other; ValueError when the
    file is not one (as far as it was read)."""
    for found, read, skip in _entries(data):
        if found == handle:
            return read()
        skip()
    return None


def answer_from_file(path: Path, handle: str, now: float | None = None) -> SessionResult | None:
    """What a poll of ``handle`` answers from an exit file, or None — the handle is then
    unknown — when the file cannot be read, does not hold it, or its tombstone expired.
    Reads up to 64 MiB: call it off the event loop."""
    try:
        stone = find(read_small_file(path, MAX_EXIT_FILE_BYTES), handle)
    except (OSError, ValueError):
        return None
    if stone is None or stone.expires_at < (time.time() if now is None else now):
        return None
    return poll_result(stone.final)
