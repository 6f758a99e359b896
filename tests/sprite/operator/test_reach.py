"""The mode check `serve` makes as root before dropping to the service account: which
directory this Python imports from the account could not read, and why."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.second_user import world_tree_dir
from zodex_gateway.sprite.reach import blocked_at, import_roots, unreadable_import_root

OTHER = 65534  # an account owning nothing here


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every account can reach (pytest's own base is under a 0700 one)."""
    with world_tree_dir("reach") as made:
        yield made


def tree(base: Path) -> Path:
    (base / "open" / "lib").mkdir(parents=True)
    (base / "open").chmod(0o755)
    (base / "open" / "lib").chmod(0o755)
    return base / "open"


def test_a_closed_directory_on_the_way_blocks(base: Path) -> None:
    open_dir = tree(base)
    assert blocked_at(open_dir / "lib", OTHER, {OTHER}) is None
    open_dir.chmod(0o700)
    assert blocked_at(open_dir / "lib", OTHER, {OTHER}) == (open_dir, 0o700)
    assert blocked_at(open_dir / "lib", os.getuid(), set()) is None, "its owner passes"


def test_group_bits_count_for_the_accounts_groups(base: Path) -> None:
    open_dir = tree(base)
    open_dir.chmod(0o750)
    gid = os.stat(open_dir).st_gid
    assert blocked_at(open_dir / "lib", OTHER, {gid}) is None
    assert blocked_at(open_dir / "lib", OTHER, {gid + 1}) == (open_dir, 0o750)


def test_unreadable_files_and_unlistable_directories_block(base: Path) -> None:
    open_dir = tree(base)
    module = open_dir / "lib" / "module.py"
    module.write_text("")
    module.chmod(0o600)
    assert blocked_at(module, OTHER, {OTHER}) == (module, 0o600)
    (open_dir / "lib").chmod(0o711)  # searchable, not listable: no import can find a module
    assert blocked_at(open_dir / "lib", OTHER, {OTHER}) == (open_dir / "lib", 0o711)


def test_a_link_is_checked_where_it_leads(base: Path) -> None:
    open_dir = tree(base)
    closed = base / "closed"
    (closed / "stdlib").mkdir(parents=True)
    closed.chmod(0o700)
    (open_dir / "python").symlink_to(closed / "stdlib")
    assert blocked_at(open_dir / "python", OTHER, {OTHER}) == (closed, 0o700)


def test_the_first_unreadable_root_is_named(base: Path) -> None:
    open_dir = tree(base)
    closed = base / "closed"
    closed.mkdir()
    closed.chmod(0o700)
    roots = [open_dir / "lib", base / "gone", closed]
    assert unreadable_import_root(OTHER, {OTHER}, roots) == (closed, closed, 0o700)
    assert unreadable_import_root(OTHER, {OTHER}, roots[:2]) is None


def test_the_roots_include_the_standard_library_and_zodex() -> None:
    roots = import_roots()
    assert Path(os.__file__).parent in roots
    assert Path(__file__).resolve().parents[3] in roots, "the directory holding zodex_gateway"
