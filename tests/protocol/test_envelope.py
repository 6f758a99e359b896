from __future__ import annotations

import re
import time
from pathlib import Path

import msgpack
import pytest

from zodex_protocol import PROTOCOL_VERSION, Envelope, ErrorCode, ProtocolError, WireCodec
from zodex_protocol.envelope import ReplayGuard, new_key, read_key_file
from zodex_system.secret_files import create_secret_file

KEY = b"k" * 32


def test_round_trip() -> None:
    codec = WireCodec(KEY)
    message = Envelope(type="exec", body={"cmd": "ls", "n": 3, "raw": b"\x00\xff"})
    got = WireCodec(KEY).deserialize(codec.serialize(message))
    assert got == message
    reply = got.reply("result", {"ok": True})
    assert reply.reply_to == message.id and reply.id != message.id


def test_tampered_payload_is_rejected() -> None:
    codec = WireCodec(KEY)
    signature, payload = codec.serialize(Envelope(type="ping", body={}))
    raw = msgpack.unpackb(payload)
    raw["type"] = "shutdown"
    with pytest.raises(ProtocolError) as err:
        WireCodec(KEY).deserialize([signature, msgpack.packb(raw)])
    assert err.value.code == ErrorCode.BAD_SIGNATURE


def test_wrong_key_is_rejected() -> None:
    frames = WireCodec(b"x" * 32).serialize(Envelope(type="ping", body={}))
    with pytest.raises(ProtocolError) as err:
        WireCodec(KEY).deserialize(frames)
    assert err.value.code == ErrorCode.BAD_SIGNATURE


def test_replay_is_rejected() -> None:
    sender, receiver = WireCodec(KEY), WireCodec(KEY)
    frames = sender.serialize(Envelope(type="ping", body={}))
    receiver.deserialize(frames)
    with pytest.raises(ProtocolError) as err:
        receiver.deserialize(frames)
    assert err.value.code == ErrorCode.REPLAYED


def test_stale_timestamp_is_rejected() -> None:
    frames = WireCodec(KEY).serialize(Envelope(type="ping", body={}, time=time.time() - 3600))
    with pytest.raises(ProtocolError) as err:
        WireCodec(KEY).deserialize(frames)
    assert err.value.code == ErrorCode.REPLAYED


def test_replay_guard_forgets_after_window() -> None:
    guard = ReplayGuard(window=10)
    guard.check("a", 100.0, now=100.0)
    with pytest.raises(ProtocolError):
        guard.check("a", 100.0, now=105.0)
    guard.check("b", 120.0, now=120.0)  # "a" expired from memory, and is outside the window anyway
    with pytest.raises(ProtocolError):
        guard.check("a", 100.0, now=120.0)


def test_replay_guard_remembers_a_message_from_a_clock_ahead_until_its_stamp_expires() -> None:
    guard = ReplayGuard(window=10)
    guard.check("ahead", 108.0, now=100.0)  # the sender's clock is 8 s ahead: accepted
    guard.check("later", 111.0, now=111.0)  # more than a window after "ahead" arrived
    with pytest.raises(ProtocolError) as err:
        guard.check("ahead", 108.0, now=111.0)  # its stamp is still inside the window
    assert err.value.message == "message ahead was already received"


def test_version_mismatch() -> None:
    frames = WireCodec(KEY).serialize(Envelope(type="ping", body={}, version=PROTOCOL_VERSION + 1))
    with pytest.raises(ProtocolError) as err:
        WireCodec(KEY).deserialize(frames)
    assert err.value.code == ErrorCode.VERSION_MISMATCH
    assert "protocol version" in err.value.message


def test_malformed_frames() -> None:
    codec = WireCodec(KEY)
    for frames in ([b"only-one"], [b"a", b"b", b"c"]):
        with pytest.raises(ProtocolError) as err:
            codec.deserialize(frames)
        assert err.value.code == ErrorCode.MALFORMED
    garbage = b"\xc1not msgpack"
    with pytest.raises(ProtocolError) as err:
        codec.deserialize([codec.sign(garbage), garbage])
    assert err.value.code == ErrorCode.MALFORMED
    missing = msgpack.packb({"v": PROTOCOL_VERSION})
    with pytest.raises(ProtocolError) as err:
        codec.deserialize([codec.sign(missing), missing])
    assert err.value.code == ErrorCode.MALFORMED


def test_error_wire_round_trip() -> None:
    error = ProtocolError(ErrorCode.CAPACITY, "full")
    assert ProtocolError.from_wire(error.to_wire()).code == ErrorCode.CAPACITY
    assert ProtocolError.from_wire({"nonsense": 1}).code == ErrorCode.MALFORMED
    assert error.is_tool_level and not ProtocolError(ErrorCode.INTERNAL, "x").is_tool_level


def test_error_codes_are_stable() -> None:
    # Released codes never change meaning: this table is the contract in docs/protocol.md.
    assert {c.name: int(c) for c in ErrorCode} == {
        "MALFORMED": 100,
        "BAD_SIGNATURE": 101,
        "REPLAYED": 102,
        "VERSION_MISMATCH": 103,
        "UNKNOWN_TYPE": 104,
        "BAD_REQUEST": 105,
        "INTERNAL": 106,
        "WORKER_LOST": 107,
        "INVALID_ARGUMENT": 200,
        "UNKNOWN_HANDLE": 201,
        "SESSION_LOST": 202,
        "CAPACITY": 203,
        "STOPPING": 204,
        "SPAWN_FAILED": 205,
        "WORKER_UNAVAILABLE": 206,
    }


def test_key_file_is_private(tmp_path: Path) -> None:
    key = new_key()
    create_secret_file(tmp_path / "key", key)
    assert (tmp_path / "key").stat().st_mode & 0o777 == 0o600
    assert read_key_file(tmp_path / "key") == key and len(key) == 32
    assert new_key() != key
    with pytest.raises(FileExistsError):
        create_secret_file(tmp_path / "key", new_key())
    assert read_key_file(tmp_path / "key") == key


def test_docs_state_the_protocol_version() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
    match = re.search(r"Protocol version: \*\*(\d+)\*\*", doc)
    assert match is not None, "docs/protocol.md must state 'Protocol version: **N**'"
    assert int(match.group(1)) == PROTOCOL_VERSION
