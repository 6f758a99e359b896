"""The one envelope every gateway↔worker message travels in, and the object that owns it.

Wire format (see docs/protocol.md): a message is two ZeroMQ frames after any routing
frames — ``[signature, payload]``. ``payload`` is a msgpack map::

    {"v": <protocol version>, "id": <message id>, "type": <message type>,
     "re": <id of the request this replies to, or nil>, "t": <unix time, float>,
     "body": <type-specific value>}

``signature`` is the 32-byte HMAC-SHA256 of ``payload`` under the runtime key. A receiver
checks the signature first, then the version, then rejects a message id it has seen or a
timestamp outside the replay window.

Nothing else in Zodex packs or signs a message: :class:`WireCodec` does it all.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from zodex_protocol.bounded import unpack_bounded
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.version import PROTOCOL_VERSION

KEY_BYTES = 32
REPLAY_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class Envelope:
    type: str
    body: Any
    id: str = field(default_factory=lambda: secrets.token_hex(12))
    reply_to: str | None = None
    time: float = field(default_factory=time.time)
    version: int = PROTOCOL_VERSION

    def reply(self, type: str, body: Any) -> Envelope:
        return Envelope(type=type, body=body, reply_to=self.id)


class ReplayGuard:
    """Remembers message ids for the replay window; memory is bounded by the message rate."""

    def __init__(self, window: float = REPLAY_WINDOW_SECONDS) -> None:
        self._window = window
        self._seen: set[str] = set()
        self._order: deque[tuple[float, str]] = deque()

    def check(self, message_id: str, sent_at: float, now: float | None = None) -> None:
        now = time.time() if now is None else now
        while self._order and self._order[0][0] < now - self._window:
            self._seen.discard(self._order.popleft()[1])
        if abs(now - sent_at) > self._window:
            raise ProtocolError(ErrorCode.REPLAYED, "message timestamp outside the replay window")
        if message_id in self._seen:
            raise ProtocolError(ErrorCode.REPLAYED, f"message {message_id} was already received")
        self._seen.add(message_id)
        # Remembered until its own timestamp leaves the window: a sender whose clock is ahead
        # stamps messages that stay acceptable for longer than a window after they arrive.
        self._order.append((max(now, sent_at), message_id))


class WireCodec:
    """Packs, signs, verifies and unpacks envelopes for one runtime key."""

    def __init__(self, key: bytes, *, check_replay: bool = True) -> None:
        if len(key) < 16:
            raise ValueError("runtime key too short")
        self._key = key
        self._guard = ReplayGuard() if check_replay else None

    def sign(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def serialize(self, message: Envelope) -> list[bytes]:
        payload = msgpack.packb(
            {
                "v": message.version,
                "id": message.id,
                "type": message.type,
                "re": message.reply_to,
                "t": message.time,
                "body": message.body,
            },
            use_bin_type=True,
        )
        return [self.sign(payload), payload]

    def deserialize(self, frames: list[bytes]) -> Envelope:
        """A verified, decoded message that is not a replay (:meth:`decode`, :meth:`admit`)."""
        return self.admit(self.decode(frames))

    def decode(self, frames: list[bytes]) -> Envelope:
        """The message of ``frames`` with its signature and version checked, decoded within
        :mod:`zodex_protocol.bounded`'s limits. No state: safe on any thread, so a large
        reply can be decoded off the event loop."""
        if len(frames) != 2:
            raise ProtocolError(ErrorCode.MALFORMED, f"expected 2 frames, got {len(frames)}")
        signature, payload = frames
        if not hmac.compare_digest(signature, self.sign(payload)):
            raise ProtocolError(ErrorCode.BAD_SIGNATURE, "message signature does not verify")
        try:
            raw = unpack_bounded(payload)
            message = Envelope(
                type=str(raw["type"]),
                body=raw["body"],
                id=str(raw["id"]),
                reply_to=None if raw["re"] is None else str(raw["re"]),
                time=float(raw["t"]),
                version=int(raw["v"]),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise ProtocolError(ErrorCode.MALFORMED, f"undecodable message: {exc}") from exc
        if message.version != PROTOCOL_VERSION:
            raise ProtocolError(
                ErrorCode.VERSION_MISMATCH,
                f"peer speaks protocol version {message.version}, this side speaks {PROTOCOL_VERSION}",
            )
        return message

    def admit(self, message: Envelope) -> Envelope:
        """``message`` unless it is a replay; on the thread that owns this codec."""
        if self._guard is not None:
            self._guard.check(message.id, message.time)
        return message

    def peek_id(self, frames: list[bytes]) -> str | None:
        """The message id of an unverifiable message, so an error reply can still name it."""
        try:
            raw = unpack_bounded(frames[-1])
            return str(raw["id"])
        except Exception:
            return None


def peek_reply_to(frames: list[bytes]) -> str | None:
    """The ``re`` of an unverifiable reply, so the request it names can fail at once (where
    the transport already authenticates the peer, as CURVE does between fleet hosts and
    gateways) instead of waiting out its timeout."""
    try:
        raw = unpack_bounded(frames[-1])
        return None if raw["re"] is None else str(raw["re"])
    except Exception:
        return None


def new_key() -> bytes:
    """A fresh runtime key; the runtime's owner keeps it in a ``0600`` file
    (zodex_system.secret_files) that its workers read."""
    return secrets.token_bytes(KEY_BYTES)


def read_key_file(path: Path) -> bytes:
    return path.read_bytes()
