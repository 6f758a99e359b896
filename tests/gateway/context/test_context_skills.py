from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.context.context_support import Homes, make_homes, make_skill
from zodex_gateway.context.skills import DESCRIPTION_LIMIT, Skill, scan_catalog, summarize
from zodex_gateway.context.sources import read_global_skills


@pytest.fixture
def homes(tmp_path: Path) -> Homes:
    return make_homes(tmp_path)


def _symlink(target: Path, link: Path) -> None:
    try:
        link.symlink_to(target, target_is_directory=True)
    except (OSError, NotImplementedError):
        pytest.skip("symlinks are not available here")


def test_both_global_roots_with_name_description_path(homes: Homes) -> None:
    a = make_skill(homes.codex / "skills", "pdf", "pdf", "Reads PDFs.")
    b = make_skill(homes.home / ".agents" / "skills", "team/deploy", "deploy", "Ships it.")
    catalog = read_global_skills(homes.env, homes.home)
    assert catalog.skills == (Skill("deploy", "Ships it.", str(b)), Skill("pdf", "Reads PDFs.", str(a)))
    assert catalog.omitted == 0


def test_name_falls_back_to_the_folder(homes: Homes) -> None:
    make_skill(homes.codex / "skills", "nameless", description="No name given.")
    make_skill(homes.codex / "skills", "blank", name='""', description="Empty name.")
    names = {skill.name for skill in read_global_skills(homes.env, homes.home).skills}
    assert names == {"nameless", "blank"}


def test_folded_description_becomes_one_line(homes: Homes) -> None:
    raw = "---\nname: fold\ndescription: >\n  Turns long\n  text into one line.\n\n  Second paragraph.\n---\n"
    make_skill(homes.codex / "skills", "fold", raw=raw)
    (skill,) = read_global_skills(homes.env, homes.home).skills
    assert skill.description == "Turns long text into one line. Second paragraph."


@pytest.mark.parametrize(
    "raw",
    [
        "no front matter at all",
        "---\nname: never closed\n",
        "---\n: : :\n\t- [\n'\n---\n",
        "",
    ],
)
def test_broken_front_matter_is_tolerated(homes: Homes, raw: str) -> None:
    make_skill(homes.codex / "skills", "broken", raw=raw)
    (skill,) = read_global_skills(homes.env, homes.home).skills
    assert skill.name == "broken"
    assert skill.description == ""


def test_undecodable_skill_file_is_tolerated(homes: Homes) -> None:
    path = make_skill(homes.codex / "skills", "bytes")
    path.write_bytes(b"---\nname: caf\xe9\ndescription: \xff\xfe ok\n---\n")
    (skill,) = read_global_skills(homes.env, homes.home).skills
    assert skill.name == "caf\ufffd"
    assert skill.description == "\ufffd\ufffd ok"


def test_fifty_entries_then_a_count(homes: Homes) -> None:
    for i in range(60):
        make_skill(homes.codex / "skills", f"s{i:02d}", f"skill-{i:02d}", "d")
    catalog = read_global_skills(homes.env, homes.home)
    assert [skill.name for skill in catalog.skills] == [f"skill-{i:02d}" for i in range(50)]
    assert catalog.omitted == 10


def test_sorted_by_name_case_insensitively_then_path(tmp_path: Path) -> None:
    make_skill(tmp_path, "z", "beta")
    make_skill(tmp_path, "y", "Alpha")
    make_skill(tmp_path, "x", "beta")
    catalog = scan_catalog([tmp_path])
    assert [(skill.name, Path(skill.path).parent.name) for skill in catalog.skills] == [
        ("Alpha", "y"),
        ("beta", "x"),
        ("beta", "z"),
    ]


def test_hidden_dirs_are_skipped(homes: Homes) -> None:
    make_skill(homes.codex / "skills", ".system/hidden", "hidden")
    make_skill(homes.codex / "skills", "group/.cache/deep", "deep")
    make_skill(homes.codex / "skills", "shown", "shown")
    assert [skill.name for skill in read_global_skills(homes.env, homes.home).skills] == ["shown"]


def test_a_skills_own_folders_are_not_scanned(tmp_path: Path) -> None:
    make_skill(tmp_path, "outer", "outer")
    make_skill(tmp_path, "outer/examples/inner", "inner")
    assert [skill.name for skill in scan_catalog([tmp_path]).skills] == ["outer"]


def test_symlinked_skill_dirs_are_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "repo"
    make_skill(elsewhere, "linked", "linked", "From a repo.")
    root = tmp_path / "skills"
    root.mkdir()
    _symlink(elsewhere / "linked", root / "linked")
    (skill,) = scan_catalog([root]).skills
    assert skill.path == str(root / "linked" / "SKILL.md")


def test_symlink_loop_does_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    make_skill(root, "a/real", "real")
    _symlink(root, root / "a" / "loop")
    _symlink(root / "a", root / "a" / "real-parent")
    (root / "self").mkdir()
    _symlink(root / "self", root / "self" / "again")
    assert [skill.name for skill in scan_catalog([root]).skills] == ["real"]


def test_a_root_linked_to_another_is_listed_once(homes: Homes) -> None:
    make_skill(homes.codex / "skills", "one", "one")
    (homes.home / ".agents").mkdir()
    _symlink(homes.codex / "skills", homes.home / ".agents" / "skills")
    assert [skill.name for skill in read_global_skills(homes.env, homes.home).skills] == ["one"]


def test_unreadable_dir_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Root reads through permission bits, so the refusal is simulated at the system call.
    make_skill(tmp_path, "ok", "ok")
    locked = tmp_path / "locked"
    make_skill(locked, "inside", "inside")
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert [skill.name for skill in scan_catalog([tmp_path]).skills] == ["ok"]


def test_missing_roots_give_an_empty_catalog(homes: Homes) -> None:
    catalog = read_global_skills(homes.env, homes.home)
    assert (catalog.skills, catalog.omitted) == ((), 0)


def test_summarize_bounds_and_prefers_sentences() -> None:
    assert summarize("  short\n\tline\x00 ") == "short line"
    long_sentences = "First sentence here is fine. " * 20
    cut = summarize(long_sentences)
    assert len(cut) <= DESCRIPTION_LIMIT
    assert cut.endswith(".")
    one_word = "x" * 500
    assert summarize(one_word) == "x" * (DESCRIPTION_LIMIT - 1) + "…"
    words = "word " * 100
    bounded = summarize(words)
    assert len(bounded) <= DESCRIPTION_LIMIT
    assert bounded.endswith("word…")


def test_a_header_too_long_to_close_is_broken_not_fatal(tmp_path: Path) -> None:
    make_skill(tmp_path, "long", raw="---\nname: long-one\ndescription: " + "x" * 40_000 + "\n---\n")
    (skill,) = scan_catalog([tmp_path]).skills
    assert (skill.name, skill.description) == ("long", "")
