"""The Sprite key file: made fresh, written privately, and refused when guessable or exposed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from zodex_gateway.sprite.key import MIN_KEY_CHARS, KeyRefused, new_key, read_key, write_key


def test_new_key_is_256_bits_url_safe_and_fresh() -> None:
    keys = {new_key() for _ in range(20)}
    assert len(keys) == 20
    for key in keys:
        assert len(key) == 43 >= MIN_KEY_CHARS
        assert set(key) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_written_key_reads_back_private_and_owned(tmp_path: Path) -> None:
    path = tmp_path / "key"
    key = new_key()
    write_key(path, key, os.getuid(), os.getgid())
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert (info.st_uid, info.st_gid) == (os.getuid(), os.getgid())
    assert read_key(path) == key
    assert read_key(path, owner_uid=os.getuid()) == key
    replaced = new_key()
    write_key(path, replaced, os.getuid(), os.getgid())
    assert read_key(path) == replaced
    assert [p.name for p in tmp_path.iterdir()] == ["key"]  # no temporary file left


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "is empty"),
        ("\n  \n", "is empty"),
        ("change-me", "shorter than 32"),
        ("x" * 40, "looks like a default"),
        ("change-me-" * 4, "looks like a default"),
        ("CHANGEME" + new_key(), "looks like a default"),
        ("my-secret-" + new_key(), "looks like a default"),
        ("Password" + new_key(), "looks like a default"),
        ("short", "shorter than 32"),
        ("a b" * 20, "not URL-safe"),
        (new_key() + "&x=1", "not URL-safe"),
    ],
)
def test_guessable_keys_are_refused(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "key"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(KeyRefused, match=reason) as caught:
        read_key(path)
    assert "\n" not in str(caught.value)
    assert "rotate-key" in str(caught.value)


def test_missing_key_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(KeyRefused, match=r"no key file at .*: run zodex sprite rotate-key"):
        read_key(tmp_path / "key")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_key_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "key"
    write_key(path, new_key(), os.getuid(), os.getgid())
    path.chmod(mode)
    with pytest.raises(KeyRefused, match=f"can be read by other accounts \\(mode {mode:04o}\\)"):
        read_key(path)


def test_symlink_and_non_regular_key_files_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    write_key(real, new_key(), os.getuid(), os.getgid())
    link = tmp_path / "key"
    link.symlink_to(real)
    with pytest.raises(KeyRefused, match="is a symbolic link"):
        read_key(link)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(KeyRefused, match="not a regular file"):
        read_key(fifo)


def test_oversized_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write_key(path, new_key(), os.getuid(), os.getgid())
    path.write_text("a1" * 3000)
    with pytest.raises(KeyRefused, match="larger than 4096 bytes"):
        read_key(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the key file another owner")
def test_key_of_another_owner_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write_key(path, new_key(), 65534, 65534)  # nobody's
    assert path.stat().st_uid == 65534
    with pytest.raises(KeyRefused, match="owned by uid 65534, not the service account"):
        read_key(path, owner_uid=4321)
    assert read_key(path, owner_uid=65534)


def test_write_key_refuses_a_weak_key_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "key"
    with pytest.raises(KeyRefused, match="shorter than"):
        write_key(path, "change-me", os.getuid(), os.getgid())
    assert not path.exists()
