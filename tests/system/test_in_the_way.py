"""Clearing a name another account may have taken (zodex_system.in_the_way)."""

from __future__ import annotations

import os
from pathlib import Path

from zodex_system import in_the_way


def test_a_file_a_link_and_an_empty_directory_are_removed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("kept")
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    for name in ("file", "link", "dangling", "empty"):
        assert in_the_way.clear(tmp_path / name), name
        assert not os.path.lexists(tmp_path / name), name
    assert target.read_text() == "kept", "a link goes, never what it points at"


def test_a_free_name_is_clear(tmp_path: Path) -> None:
    assert in_the_way.clear(tmp_path / "none")


def test_a_directory_with_something_inside_stays(tmp_path: Path) -> None:
    full = tmp_path / "full"
    (full / "inside").mkdir(parents=True)
    assert not in_the_way.clear(full)
    assert (full / "inside").is_dir()


def test_a_link_to_a_directory_is_unlinked_and_the_directory_kept(tmp_path: Path) -> None:
    (tmp_path / "dir" / "inside").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    assert in_the_way.clear(tmp_path / "link")
    assert not os.path.lexists(tmp_path / "link")
    assert (tmp_path / "dir" / "inside").is_dir()
