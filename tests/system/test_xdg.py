"""Where Zodex keeps its files: one set of XDG rules (docs/modes.md#local, docs/config.md,
docs/security.md#state-directories)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from zodex_gateway.config.settings import config_path
from zodex_gateway.local.paths import LocalPaths
from zodex_system import xdg

VARIABLES = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def test_the_variables_name_the_bases(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "s"))
    (tmp_path / "r").mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "r"))
    assert xdg.config_dir() == tmp_path / "c" / "zodex"
    assert xdg.local_state_dir() == tmp_path / "s" / "zodex" / "local"
    assert xdg.runtime_root() == tmp_path / "r" / "zodex"
    assert xdg.runtime_base(xdg.runtime_root()) == tmp_path / "r"


@pytest.mark.parametrize("value", [None, "", "relative/dir"])
def test_unset_empty_or_relative_variables_fall_back_to_the_home_defaults(
    value: str | None, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is not None:
        for name in VARIABLES:
            monkeypatch.setenv(name, value)
    assert xdg.config_dir() == home / ".config" / "zodex"
    assert xdg.local_state_dir() == home / ".local" / "state" / "zodex" / "local"
    fallback = Path(tempfile.gettempdir()) / f"zodex-{os.getuid()}"
    assert xdg.runtime_root() == fallback
    assert xdg.runtime_base(fallback) == fallback, "the /tmp fallback is its own base"


def test_a_runtime_dir_that_does_not_exist_falls_back_to_tmp(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert xdg.runtime_root() == Path(tempfile.gettempdir()) / f"zodex-{os.getuid()}"


def test_every_user_of_a_path_resolves_it_the_same_way(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "relative")  # ignored everywhere alike
    (tmp_path / "r").mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "r"))
    paths = LocalPaths.from_env()
    assert paths.state == xdg.local_state_dir() == home / ".local" / "state" / "zodex" / "local"
    assert paths.state_base == home / ".local" / "state"
    assert paths.config_dir == xdg.config_dir() == config_path().parent
    assert paths.runtime_root == xdg.runtime_root() == tmp_path / "r" / "zodex"


def test_a_relative_home_is_taken_as_unset(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    monkeypatch.setenv("HOME", "relative/home")
    account_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert xdg.config_dir() == account_home / ".config" / "zodex"
    assert xdg.local_state_dir() == account_home / ".local" / "state" / "zodex" / "local"


def test_a_fallback_root_that_is_not_the_users_own_is_never_used(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    default = shared / f"zodex-{os.getuid()}"
    # A link in its place, to a directory that is the user's: not a directory of its own.
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    default.symlink_to(tmp_path / "elsewhere")
    # A name of the fresh form that is a plain file, and one that is group-writable.
    (shared / f"zodex-{os.getuid()}-aaaa").write_text("")
    (shared / f"zodex-{os.getuid()}-bbbb").mkdir()
    (shared / f"zodex-{os.getuid()}-bbbb").chmod(0o770)
    root = xdg.runtime_root()
    assert root.parent == shared and root.name.startswith(f"zodex-{os.getuid()}-")
    assert root.name not in (f"zodex-{os.getuid()}-aaaa", f"zodex-{os.getuid()}-bbbb")
    assert root.is_dir() and not root.is_symlink() and (root.stat().st_mode & 0o777) == 0o700
    assert xdg.runtime_root() == root, "found again, not made afresh each time"
    assert xdg.runtime_base(root) == root
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_missing_fallback_root_is_made_private_at_once(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = xdg.runtime_root()
    assert root == tmp_path / f"zodex-{os.getuid()}"
    assert root.is_dir() and (root.stat().st_mode & 0o777) == 0o700
