from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gateway.context.context_support import Homes, make_homes, make_skill
from zodex_gateway.context.files import cut_utf8
from zodex_gateway.context.sources import (
    INSTRUCTIONS_LIMIT,
    codex_home,
    read_global_instructions,
    read_workdir,
)


@pytest.fixture
def homes(tmp_path: Path) -> Homes:
    return make_homes(tmp_path)


def test_codex_home_defaults_and_expansion(tmp_path: Path) -> None:
    home = tmp_path / "h"
    assert codex_home({}, home) == home / ".codex"
    assert codex_home({"CODEX_HOME": "  "}, home) == home / ".codex"
    assert codex_home({"CODEX_HOME": "~/cx"}, home) == home / "cx"
    assert codex_home({"CODEX_HOME": "rel"}, home) == home / "rel"
    assert codex_home({"CODEX_HOME": str(tmp_path / "abs")}, home) == tmp_path / "abs"


def test_default_codex_home_is_under_home(tmp_path: Path) -> None:
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "AGENTS.md").write_text("be brief\n", encoding="utf-8")
    found = read_global_instructions({}, tmp_path)
    assert found is not None
    assert found.text == "be brief"


def test_override_wins_over_agents(homes: Homes) -> None:
    (homes.codex / "AGENTS.md").write_text("plain", encoding="utf-8")
    (homes.codex / "AGENTS.override.md").write_text("override", encoding="utf-8")
    found = read_global_instructions(homes.env, homes.home)
    assert found is not None
    assert (found.text, found.path, found.truncated) == (
        "override",
        str(homes.codex / "AGENTS.override.md"),
        False,
    )


def test_empty_override_does_not_hide_agents(homes: Homes) -> None:
    (homes.codex / "AGENTS.md").write_text("plain", encoding="utf-8")
    (homes.codex / "AGENTS.override.md").write_text(" \n\n", encoding="utf-8")
    found = read_global_instructions(homes.env, homes.home)
    assert found is not None
    assert found.text == "plain"


def test_missing_and_non_regular_files(homes: Homes) -> None:
    assert read_global_instructions(homes.env, homes.home) is None
    (homes.codex / "AGENTS.md").mkdir()
    assert read_global_instructions(homes.env, homes.home) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_does_not_block(homes: Homes) -> None:
    os.mkfifo(homes.codex / "AGENTS.override.md")
    (homes.codex / "AGENTS.md").write_text("plain", encoding="utf-8")
    found = read_global_instructions(homes.env, homes.home)
    assert found is not None
    assert found.text == "plain"


def test_undecodable_bytes_are_replaced(homes: Homes) -> None:
    (homes.codex / "AGENTS.md").write_bytes(b"\xef\xbb\xbfcaf\xe9 \xff ok")
    found = read_global_instructions(homes.env, homes.home)
    assert found is not None
    assert found.text == "caf\ufffd \ufffd ok"


def test_bound_cuts_on_a_character_and_says_so(homes: Homes) -> None:
    # No newline anywhere, 3-byte characters straddling the limit.
    data = ("€" * 20_000).encode("utf-8")
    (homes.codex / "AGENTS.md").write_bytes(data)
    found = read_global_instructions(homes.env, homes.home)
    assert found is not None
    kept = found.text.encode("utf-8")
    assert len(kept) <= INSTRUCTIONS_LIMIT
    assert "\ufffd" not in found.text
    assert found.truncated
    assert found.omitted_bytes == len(data) - len(kept)


def test_bound_prefers_a_near_line_end(homes: Homes) -> None:
    line = "x" * 99 + "\n"
    (homes.codex / "AGENTS.md").write_text(line * 1000, encoding="utf-8")
    found = read_global_instructions(homes.env, homes.home)
    assert found is not None
    assert found.text.endswith("x" * 99)
    assert len(found.text) + 1 == (INSTRUCTIONS_LIMIT // 100) * 100
    assert found.omitted_bytes == 100_000 - (len(found.text) + 1)


def test_exact_limit_is_not_truncated(homes: Homes) -> None:
    (homes.codex / "AGENTS.md").write_bytes(b"a" * INSTRUCTIONS_LIMIT)
    found = read_global_instructions(homes.env, homes.home)
    assert found is not None
    assert not found.truncated
    assert len(found.text) == INSTRUCTIONS_LIMIT


@pytest.mark.parametrize("limit", range(1, 12))
def test_cut_utf8_always_decodes(limit: int) -> None:
    data = "aé€😀b".encode()
    kept = cut_utf8(data, limit)
    assert len(kept) <= limit
    kept.decode("utf-8")


def test_workdir_agents_files_in_precedence_order(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x", encoding="utf-8")
    assert read_workdir(str(tmp_path)).agents_files == (str(tmp_path / "AGENTS.md"),)
    (tmp_path / "AGENTS.override.md").write_text("x", encoding="utf-8")
    assert read_workdir(str(tmp_path)).agents_files == (
        str(tmp_path / "AGENTS.override.md"),
        str(tmp_path / "AGENTS.md"),
    )


def test_workdir_skills_and_switches(tmp_path: Path) -> None:
    make_skill(tmp_path / ".agents" / "skills", "lint", "lint", "Runs the linters.")
    (tmp_path / "AGENTS.md").write_text("x", encoding="utf-8")
    info = read_workdir(str(tmp_path))
    assert [skill.name for skill in info.skills.skills] == ["lint"]
    assert not info.empty
    assert read_workdir(str(tmp_path), hint=False).agents_files == ()
    assert read_workdir(str(tmp_path), skills=False).skills.skills == ()
    assert read_workdir(str(tmp_path), hint=False, skills=False).empty


def test_missing_workdir_is_empty(tmp_path: Path) -> None:
    assert read_workdir(str(tmp_path / "gone")).empty
