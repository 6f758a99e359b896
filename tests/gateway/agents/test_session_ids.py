"""Session ids the gateway verifies without remembering them, and the key that signs them
(docs/agents.md#identity, docs/security.md#secrets)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from zodex_gateway.agents.session_ids import (
    SESSION_ID_CHARS,
    BadSessionKey,
    SessionIds,
    load_or_create_session_ids,
)
from zodex_system.private_dirs import UnsafeDirectory
from zodex_system.secret_files import UnsafeSecretFile


def test_an_issued_id_is_verified_and_ids_differ() -> None:
    ids = SessionIds.ephemeral()
    first, second = ids.issue(), ids.issue()
    assert first != second
    for issued in (first, second):
        assert len(issued) == SESSION_ID_CHARS
        assert re.fullmatch(r"z1\.[0-9a-f]{32}\.[0-9a-f]{32}", issued)
        assert ids.verify(issued)


def test_an_id_of_another_key_is_refused() -> None:
    assert not SessionIds.ephemeral().verify(SessionIds.ephemeral().issue())


def forged(issued: str) -> list[str]:
    random_part, mac = issued[3:35], issued[36:]
    flip = "0" if mac[-1] != "0" else "1"
    other = "0" if random_part[0] != "0" else "1"
    return [
        issued[:-1] + flip,  # the MAC changed
        f"z1.{other}{random_part[1:]}.{mac}",  # the random part changed, its MAC kept
        issued.upper(),  # the same id, another spelling
        "z2" + issued[2:],  # another version
        issued + "0",  # too long by one
        issued[:-1],  # too short by one
        issued + "\n",
        " " + issued,
        "",
        "not-a-session",
        "z1." + "a" * 4000,  # oversized
    ]


def test_every_other_value_is_refused() -> None:
    ids = SessionIds.ephemeral()
    for value in forged(ids.issue()):
        assert not ids.verify(value), value


def test_the_key_file_is_made_once_0600_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "state" / "runtime" / "mcp-session-key"
    ids = load_or_create_session_ids(path)
    info = path.stat()
    assert info.st_mode & 0o777 == 0o600 and info.st_uid == os.geteuid()
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert re.fullmatch(r"[0-9a-f]{64}\n", path.read_text())
    issued = ids.issue()
    again = load_or_create_session_ids(path)  # a restart: the same key, the same ids
    assert again.verify(issued)
    assert path.stat().st_ino == info.st_ino, "not rewritten"


def test_a_replaced_key_no_longer_accepts_old_ids(tmp_path: Path) -> None:
    path = tmp_path / "runtime" / "mcp-session-key"
    issued = load_or_create_session_ids(path).issue()
    path.unlink()
    assert not load_or_create_session_ids(path).verify(issued)


@pytest.mark.parametrize("content", [b"", b"short\n", b"g" * 64 + b"\n", b"\xff" * 64])
def test_a_damaged_key_is_refused_and_kept(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "runtime" / "mcp-session-key"
    load_or_create_session_ids(path)
    path.write_bytes(content)
    with pytest.raises(BadSessionKey) as refused:
        load_or_create_session_ids(path)
    assert str(refused.value) == (
        f"{path} does not hold a session key (64 hex characters): remove it and a new one is made "
        "(session ids issued under the old key stop working)"
    )
    assert path.read_bytes() == content, "nothing replaced"


def test_a_key_open_to_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runtime" / "mcp-session-key"
    load_or_create_session_ids(path)
    os.chmod(path, 0o644)
    with pytest.raises(UnsafeSecretFile, match="is open to group or others"):
        load_or_create_session_ids(path)


def test_a_key_directory_open_to_others_is_refused(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    os.chmod(runtime, 0o777)
    with pytest.raises(UnsafeDirectory, match="is writable by group or others"):
        load_or_create_session_ids(runtime / "mcp-session-key")
    assert not (runtime / "mcp-session-key").exists()
