"""Directories that hold secrets are the user's own (docs/security.md#state-directories):
made 0700, Zodex's own tightened, and a tree another account owns or may write refused
with one line before anything is made or changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from zodex_system.private_dirs import UnsafeDirectory, check_tree, make_private_dirs


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "base"
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)
    return path


def test_missing_directories_are_made_private(base: Path) -> None:
    make_private_dirs([base / "zodex" / "local"], base)
    assert mode(base / "zodex") == mode(base / "zodex" / "local") == 0o700
    assert mode(base) == 0o755, "the base is the user's layout, not tightened"


def test_a_missing_base_is_made_too(tmp_path: Path) -> None:
    base = tmp_path / "a" / "base"
    make_private_dirs([base / "zodex"], base)
    assert mode(base) == mode(base / "zodex") == 0o700


def test_zodex_own_directories_are_tightened(base: Path) -> None:
    (base / "zodex").mkdir(mode=0o750)
    os.chmod(base / "zodex", 0o750)
    make_private_dirs([base / "zodex" / "local"], base)
    assert mode(base / "zodex") == 0o700


def test_a_writable_directory_is_refused_before_anything_is_made(base: Path) -> None:
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafeDirectory) as caught:
        make_private_dirs([base / "fine" / "deep", shared / "zodex"], base)
    message = str(caught.value)
    assert "\n" not in message
    assert (
        f"{shared} (owner " in message and "(mode 0777)" in message and f"run chmod go-w {shared}" in message
    )
    assert not (base / "fine").exists(), "every path is checked before any is made"
    assert mode(shared) == 0o777, "an unsafe directory is not changed"


def test_a_writable_base_is_refused(base: Path) -> None:
    os.chmod(base, 0o775)
    with pytest.raises(UnsafeDirectory, match="writable by group or others"):
        check_tree(base / "zodex", base)


def test_a_file_in_the_way_is_refused(base: Path) -> None:
    (base / "zodex").write_text("")
    with pytest.raises(UnsafeDirectory, match="is not a directory"):
        make_private_dirs([base / "zodex" / "local"], base)


def test_links_are_judged_by_what_they_point_at(base: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (base / "zodex").symlink_to(mine)
    make_private_dirs([base / "zodex" / "local"], base)
    assert (mine / "local").is_dir()
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    (base / "other").symlink_to(open_dir)
    with pytest.raises(UnsafeDirectory, match="writable by group or others"):
        make_private_dirs([base / "other" / "local"], base)
    assert not (open_dir / "local").exists()


def test_a_directory_another_account_owns_is_refused(base: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another account needs root")
    theirs = base / "zodex"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UnsafeDirectory) as caught:
        make_private_dirs([theirs / "local"], base)
    assert str(caught.value).startswith(f"{theirs} is owned by ")
    assert "not by you (root)" in str(caught.value) and "remove it or change its owner" in str(caught.value)
    assert not (theirs / "local").exists()
