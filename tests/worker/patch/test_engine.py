"""Behaviour that does not fit the scenario table: symlinks, temporary files, the parser
and matcher seams, and concurrent use from threads."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from zodex_worker.patch import apply_patch
from zodex_worker.patch.lineview import LineView
from zodex_worker.patch.matcher import Ambiguous, Placement, locate
from zodex_worker.patch.model import Chunk, PatchSyntaxError, UpdateFile
from zodex_worker.patch.parser import parse_patch


def _patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"])


def test_update_through_a_symlink_edits_the_target(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("a\n")
    (tmp_path / "link.txt").symlink_to("real.txt")
    outcome = apply_patch(_patch("*** Update File: link.txt", "@@", "-a", "+b"), str(tmp_path))
    assert outcome.ok, outcome.text
    assert (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "real.txt").read_text() == "b\n"


def test_delete_of_a_symlink_removes_only_the_link(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("a\n")
    (tmp_path / "link.txt").symlink_to("real.txt")
    outcome = apply_patch(_patch("*** Delete File: link.txt"), str(tmp_path))
    assert outcome.ok, outcome.text
    assert not (tmp_path / "link.txt").exists()
    assert (tmp_path / "real.txt").read_text() == "a\n"


def test_write_failure_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f.txt").write_text("a\n")

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    outcome = apply_patch(_patch("*** Update File: f.txt", "@@", "-a", "+b"), str(tmp_path))
    assert not outcome.ok
    assert f"cannot write {tmp_path / 'f.txt'}: Permission denied" in outcome.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    assert (tmp_path / "f.txt").read_text() == "a\n"


def test_new_file_mode_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        apply_patch(_patch("*** Add File: new.txt", "+x"), str(tmp_path))
    finally:
        os.umask(old)
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o640


def test_parser_builds_operations_with_line_numbers() -> None:
    ops = parse_patch(
        _patch("*** Update File: a.py", "*** Move to: b.py", "@@ class A:", " x", "-y", "+z", "")
    )
    assert ops == (
        UpdateFile(
            path="a.py",
            move_to="b.py",
            chunks=(
                Chunk(
                    contexts=("class A:",),
                    items=((" ", "x"), ("-", "y"), ("+", "z"), (" ", "")),
                    eof=False,
                    line=4,
                    trailing_blanks=1,
                ),
            ),
            line=2,
        ),
    )


def test_parser_error_is_a_patch_syntax_error() -> None:
    with pytest.raises(PatchSyntaxError, match=r"^Invalid patch hunk on line 3: "):
        parse_patch(_patch("*** Update File: a.py", "oops"))


def test_in_order_search_continues_after_the_previous_chunk() -> None:
    view = LineView(["x", "a", "x", "b", "x"])
    chunks = (
        Chunk(contexts=(), items=(("-", "a"),), eof=False, line=1),
        Chunk(contexts=(), items=(("-", "x"), ("+", "X")), eof=False, line=2),
    )
    placements = locate(view, chunks)
    assert isinstance(placements, list)
    assert [(p.start, p.length) for p in placements] == [(1, 1), (2, 1)]


def test_out_of_order_reports_every_matching_line() -> None:
    # In order, "x" is searched after "a" and is not there; out of order it is twice.
    view = LineView(["x", "b", "x", "a"])
    chunks = (
        Chunk(contexts=(), items=(("-", "a"),), eof=False, line=1),
        Chunk(contexts=(), items=(("-", "x"),), eof=False, line=2),
    )
    failure = locate(view, chunks)
    assert failure == Ambiguous(number=2, chunk=chunks[1], starts=(0, 2), insertion=False)


def test_anchor_occurring_twice_is_fine_when_both_lead_to_one_place() -> None:
    # In order the chunks fail (the second is earlier), so each is placed on its own:
    # `@@ def f` occurs twice, but the old lines only follow the second occurrence.
    view = LineView(["start", "def f", "pass", "def f", "body", "end"])
    chunks = (
        Chunk(contexts=(), items=(("-", "end"), ("+", "END")), eof=False, line=1),
        Chunk(contexts=("def f",), items=(("-", "body"), ("+", "BODY")), eof=False, line=2),
    )
    placements = locate(view, chunks)
    assert isinstance(placements, list)
    assert [(p.start, p.number) for p in placements] == [(4, 2), (5, 1)]
    assert all(isinstance(p, Placement) for p in placements)


def test_concurrent_calls_on_different_files(tmp_path: Path) -> None:
    for i in range(8):
        (tmp_path / f"f{i}.txt").write_text("\n".join(f"{i}-{n}" for n in range(500)) + "\n")
    results: dict[int, bool] = {}

    def work(i: int) -> None:
        patch = _patch(f"*** Update File: f{i}.txt", "@@", f"-{i}-250", f"+changed {i}")
        results[i] = apply_patch(patch, str(tmp_path)).ok

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == dict.fromkeys(range(8), True)
    for i in range(8):
        assert f"changed {i}\n" in (tmp_path / f"f{i}.txt").read_text()
