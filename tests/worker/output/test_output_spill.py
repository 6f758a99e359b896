"""SpillFile and the stale spill file clean-up."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from zodex_worker.output.spill import SpillFile, remove_stale_spill_files


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


def test_creates_private_directory_and_file(tmp_path: Path, loose_umask: None) -> None:
    spill = SpillFile(tmp_path / "state" / "spill" / "s1.log")
    try:
        assert mode(tmp_path / "state" / "spill") == 0o700
        assert mode(spill.path) == 0o600
        assert spill.path.is_absolute()
    finally:
        spill.close()


def test_existing_directory_is_made_private(tmp_path: Path) -> None:
    directory = tmp_path / "spill"
    directory.mkdir()
    directory.chmod(0o755)
    SpillFile(directory / "s.log").close()
    assert mode(directory) == 0o700


def test_never_writes_through_an_existing_file_or_symlink(tmp_path: Path) -> None:
    (tmp_path / "taken.log").write_text("keep")
    with pytest.raises(FileExistsError):
        SpillFile(tmp_path / "taken.log")
    assert (tmp_path / "taken.log").read_text() == "keep"
    target = tmp_path / "target"
    (tmp_path / "link.log").symlink_to(target)
    with pytest.raises(FileExistsError):
        SpillFile(tmp_path / "link.log")
    assert not target.exists()


def test_directory_that_cannot_be_made_raises(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        SpillFile(tmp_path / "file" / "spill" / "s.log")


def test_writes_are_visible_before_close(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "s.log")
    try:
        spill.write("héllo\n")
        assert spill.path.read_text(encoding="utf-8") == "héllo\n"
        spill.write("more\n")
        assert spill.path.read_text(encoding="utf-8") == "héllo\nmore\n"
        assert spill.bytes_written == len("héllo\nmore\n".encode())
        assert not spill.truncated
    finally:
        spill.close()


@pytest.mark.parametrize("cap", range(14))
def test_cap_cuts_at_a_character_boundary(tmp_path: Path, cap: int) -> None:
    full = "aé€😀bz"  # 1, 2, 3, 4, 1 and 1 bytes: 12 in all
    spill = SpillFile(tmp_path / "s.log", cap_bytes=cap)
    spill.write(full[:-1])
    spill.write(full[-1])
    spill.close()
    data = (tmp_path / "s.log").read_bytes()
    assert len(data) <= cap
    content = data.decode("utf-8")  # would fail on a split character
    fits = max(i for i in range(len(full) + 1) if len(full[:i].encode()) <= cap)
    assert content == full[:fits]
    assert spill.truncated == (cap < 12)


def test_after_truncation_nothing_more_is_written(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "s.log", cap_bytes=5)
    spill.write("abc")
    spill.write("😀")  # does not fit: the file stops here, even though "d" would fit
    spill.write("d")
    spill.close()
    assert (tmp_path / "s.log").read_text() == "abc"
    assert spill.truncated


def test_write_error_marks_truncated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spill = SpillFile(tmp_path / "s.log")

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    spill.write("x")
    monkeypatch.undo()
    spill.close()
    assert spill.truncated


def test_close_is_idempotent_and_later_writes_are_ignored(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "s.log")
    spill.write("a")
    spill.close()
    spill.close()
    spill.write("b")
    assert spill.closed
    assert (tmp_path / "s.log").read_text() == "a"


class TestRemoveStale:
    NOW = 1_700_000_000.0
    DAY = 24 * 3600.0

    def make(self, path: Path, age: float) -> Path:
        path.write_text("x")
        os.utime(path, (self.NOW - age, self.NOW - age))
        return path

    def test_removes_only_old_spill_files(self, tmp_path: Path) -> None:
        old = self.make(tmp_path / "old.log", self.DAY + 60)
        older = self.make(tmp_path / "older.log", 3 * self.DAY)
        fresh = self.make(tmp_path / "fresh.log", self.DAY - 60)
        other = self.make(tmp_path / "notes.txt", 3 * self.DAY)
        (tmp_path / "sub.log").mkdir()
        assert remove_stale_spill_files(tmp_path, self.DAY, now=self.NOW) == 2
        assert not old.exists() and not older.exists()
        assert fresh.exists() and other.exists() and (tmp_path / "sub.log").is_dir()

    def test_leaves_symlinks_alone(self, tmp_path: Path) -> None:
        target = self.make(tmp_path / "target.txt", 3 * self.DAY)
        link = tmp_path / "link.log"
        link.symlink_to(target)
        os.utime(link, (self.NOW - 3 * self.DAY,) * 2, follow_symlinks=False)
        assert remove_stale_spill_files(tmp_path, self.DAY, now=self.NOW) == 0
        assert link.is_symlink() and target.exists()

    def test_defaults_to_the_current_time(self, tmp_path: Path) -> None:
        self.make(tmp_path / "a.log", 0)  # NOW is in 2023: long ago
        assert remove_stale_spill_files(tmp_path, self.DAY) == 1

    def test_missing_directory(self, tmp_path: Path) -> None:
        assert remove_stale_spill_files(tmp_path / "missing", self.DAY) == 0
        (tmp_path / "file").write_text("")
        assert remove_stale_spill_files(tmp_path / "file", self.DAY) == 0

    def test_file_removed_meanwhile_is_not_counted(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.make(tmp_path / "a.log", 3 * self.DAY)
        self.make(tmp_path / "b.log", 3 * self.DAY)
        real_unlink = os.unlink

        def racing_unlink(path: str) -> None:
            real_unlink(path)
            if path.endswith("a.log"):
                raise FileNotFoundError(path)  # as if another worker got there first

        monkeypatch.setattr(os, "unlink", racing_unlink)
        assert remove_stale_spill_files(tmp_path, self.DAY, now=self.NOW) == 1
        assert not any(tmp_path.iterdir())
