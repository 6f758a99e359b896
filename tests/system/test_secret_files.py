"""The one writer of secret files: born 0600, never through a planted link, atomic."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from zodex_system.secret_files import (
    UnsafeSecretFile,
    check_secret_file,
    create_secret_file,
    read_secret_file,
    write_group_readable_file,
    write_secret_file,
)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that would leave a carelessly created file readable by everyone."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_a_secret_file_is_born_private(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "token"
    write_secret_file(path, b"s3cret\n")
    assert path.read_bytes() == b"s3cret\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["token"], "no temporary file is left"


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_a_group_readable_file_is_0640_whatever_the_umask_and_never_through_a_link(
    tmp_path: Path, umask: int
) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"theirs")
    path = tmp_path / "w-1.exit"
    path.symlink_to(target)
    old = os.umask(umask)
    try:
        write_group_readable_file(path, b"stones")
    finally:
        os.umask(old)
    assert not path.is_symlink() and path.read_bytes() == b"stones"
    assert path.stat().st_mode & 0o777 == 0o640
    assert target.read_bytes() == b"theirs"
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "w-1.exit"], "no temporary file is left"


def test_a_rewrite_replaces_the_file_rather_than_writing_into_it(tmp_path: Path) -> None:
    path = tmp_path / "bearer"
    path.write_bytes(b"old\n")
    os.chmod(path, 0o644)
    before = path.stat().st_ino
    held = path.open("rb")  # a reader of the old file keeps reading the old content
    write_secret_file(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.stat().st_ino != before
    assert held.read() == b"old\n"
    held.close()


def test_a_planted_link_is_replaced_and_its_target_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"theirs")
    path = tmp_path / "token"
    path.symlink_to(target)
    write_secret_file(path, b"mine")
    assert not path.is_symlink() and path.read_bytes() == b"mine"
    assert target.read_bytes() == b"theirs"


def test_create_refuses_an_existing_name_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "key"
    create_secret_file(path, b"k1")
    assert path.read_bytes() == b"k1" and path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        create_secret_file(path, b"k2")
    assert path.read_bytes() == b"k1"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        create_secret_file(dangling, b"k3")
    assert not (tmp_path / "nowhere").exists(), "a link is never followed to create its target"
    assert sorted(os.listdir(tmp_path)) == ["dangling", "key"], "no temporary file is left"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "token"
    write_secret_file(path, b"old")

    def fail(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_secret_file(path, b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["token"]


def test_concurrent_writers_never_leave_a_mixed_or_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "bearer"
    contents = [bytes([65 + i]) * 4096 for i in range(6)]
    seen: set[bytes] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.add(path.read_bytes())
            except FileNotFoundError:
                pass

    def write(data: bytes) -> None:
        for _ in range(30):
            write_secret_file(path, data)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(c,)) for c in contents]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert path.read_bytes() in contents
    assert seen <= set(contents), "a reader saw a file that no writer wrote whole"
    assert os.listdir(tmp_path) == ["bearer"]


# -- reading a secret kept across restarts --------------------------------------------------


def test_a_private_file_of_ones_own_is_read(tmp_path: Path) -> None:
    path = tmp_path / "key"
    create_secret_file(path, b"k3y\n")
    assert read_secret_file(path) == b"k3y\n"
    check_secret_file(path)
    check_secret_file(tmp_path / "missing")  # nothing to refuse
    with pytest.raises(FileNotFoundError):
        read_secret_file(tmp_path / "missing")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610, 0o601])
def test_a_file_open_to_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "key"
    create_secret_file(path, b"k3y\n")
    os.chmod(path, mode)
    expected = (
        f"{path} is open to group or others (mode {mode:04o}): Zodex will not use it as a secret, "
        "which others may have read; remove it"
    )
    for refuse in (read_secret_file, check_secret_file):
        with pytest.raises(UnsafeSecretFile) as refused:
            refuse(path)
        assert str(refused.value) == expected
    assert path.stat().st_mode & 0o777 == mode, "nothing chmodded"


def test_a_link_or_a_directory_in_the_files_place_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    create_secret_file(target, b"k3y\n")
    link = tmp_path / "key"
    link.symlink_to(target)
    with pytest.raises(UnsafeSecretFile, match=r"cannot be opened as a secret file .*: remove it$"):
        read_secret_file(link)
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    with pytest.raises(UnsafeSecretFile) as refused:
        read_secret_file(directory)
    assert (
        str(refused.value)
        == f"{directory} is not a regular file: Zodex will not use it as a secret; remove it"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another account needs root")
def test_a_file_owned_by_another_account_is_refused(tmp_path: Path) -> None:
    import pwd

    path = tmp_path / "key"
    create_secret_file(path, b"k3y\n")
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(UnsafeSecretFile) as refused:
        read_secret_file(path)
    assert str(refused.value) == (
        f"{path} is owned by nobody, not by you (root): Zodex will not use it as a secret; remove it"
    )
