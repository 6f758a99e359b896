"""The per-file evidence apply_patch returns for history: operation, paths, counts, diff."""

from __future__ import annotations

import difflib
from pathlib import Path

from zodex_worker.patch import FileEvidence, apply_patch


def _patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"])


def test_update_evidence_matches_a_unified_diff(tmp_path: Path) -> None:
    old = [f"line {i}" for i in range(1, 21)]
    (tmp_path / "f.txt").write_text("\n".join(old) + "\n")
    outcome = apply_patch(
        _patch("*** Update File: f.txt", "@@", "-line 2", "+LINE 2", "+extra", "@@", " line 17", "-line 18"),
        str(tmp_path),
    )
    assert outcome.ok, outcome.text
    new = (tmp_path / "f.txt").read_text().splitlines()
    path = str(tmp_path / "f.txt")
    expected_rows = tuple(difflib.unified_diff(old, new, path, path, lineterm=""))
    assert outcome.files == (FileEvidence("edited", path, None, added=2, removed=2, diff=expected_rows),)
    # Two hunks: the changes are more than 2 x 3 context lines apart.
    assert [row for row in expected_rows if row.startswith("@@")] == ["@@ -1,5 +1,6 @@", "@@ -15,6 +16,5 @@"]


def test_add_evidence(tmp_path: Path) -> None:
    outcome = apply_patch(_patch("*** Add File: dir/new.txt", "+a", "+b"), str(tmp_path))
    path = str(tmp_path / "dir" / "new.txt")
    assert outcome.files == (
        FileEvidence(
            "created", path, None, 2, 0, ("--- /dev/null", f"+++ {path}", "@@ -0,0 +1,2 @@", "+a", "+b")
        ),
    )


def test_add_over_existing_file_counts_what_was_replaced(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("keep\nold\n")
    outcome = apply_patch(_patch("*** Add File: f.txt", "+keep", "+new"), str(tmp_path))
    path = str(tmp_path / "f.txt")
    (evidence,) = outcome.files
    assert (evidence.operation, evidence.added, evidence.removed) == ("created", 1, 1)
    assert evidence.diff == (f"--- {path}", f"+++ {path}", "@@ -1,2 +1,2 @@", " keep", "-old", "+new")


def test_delete_evidence(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a\nb\n")
    outcome = apply_patch(_patch("*** Delete File: f.txt"), str(tmp_path))
    path = str(tmp_path / "f.txt")
    assert outcome.files == (
        FileEvidence(
            "deleted", path, None, 0, 2, (f"--- {path}", "+++ /dev/null", "@@ -1,2 +0,0 @@", "-a", "-b")
        ),
    )


def test_rename_evidence_names_both_paths(tmp_path: Path) -> None:
    (tmp_path / "src.txt").write_text("a\nb\n")
    outcome = apply_patch(
        _patch("*** Update File: src.txt", "*** Move to: sub/dst.txt", "@@", " a", "-b", "+c"), str(tmp_path)
    )
    src, dst = str(tmp_path / "src.txt"), str(tmp_path / "sub" / "dst.txt")
    assert outcome.files == (
        FileEvidence(
            "renamed", dst, src, 1, 1, (f"--- {src}", f"+++ {dst}", "@@ -1,2 +1,2 @@", " a", "-b", "+c")
        ),
    )


def test_context_only_chunk_gives_a_diff_without_hunks(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a\n")
    outcome = apply_patch(_patch("*** Update File: f.txt", "@@", " a"), str(tmp_path))
    path = str(tmp_path / "f.txt")
    assert outcome.files == (FileEvidence("edited", path, None, 0, 0, (f"--- {path}", f"+++ {path}")),)


def test_diff_rows_are_bounded(tmp_path: Path) -> None:
    lines = [f"+row {i}" for i in range(3000)]
    outcome = apply_patch(_patch("*** Add File: big.txt", *lines), str(tmp_path))
    (evidence,) = outcome.files
    assert evidence.added == 3000
    assert len(evidence.diff) == 2001
    assert evidence.diff[1999] == "+row 1996"  # 2 file headers and 1 hunk header come first
    assert evidence.diff[-1] == "… 1003 more rows"


def test_only_applied_operations_have_evidence(tmp_path: Path) -> None:
    (tmp_path / "ok.txt").write_text("x\n")
    outcome = apply_patch(
        _patch("*** Delete File: missing.txt", "*** Update File: ok.txt", "@@", "-x", "+y"), str(tmp_path)
    )
    assert not outcome.ok
    assert [(e.operation, e.path) for e in outcome.files] == [("edited", str(tmp_path / "ok.txt"))]


def test_invalid_patch_has_no_evidence(tmp_path: Path) -> None:
    outcome = apply_patch("*** Begin Patch\n*** Add File: a.txt\n+a\n", str(tmp_path))
    assert (outcome.ok, outcome.files) == (False, ())
    assert not (tmp_path / "a.txt").exists()
