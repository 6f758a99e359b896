from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.gateway.context.context_support import Homes, make_homes, make_skill
from zodex_gateway.context import (
    FOOTER,
    HEADER,
    ContextProvider,
    ContextSwitches,
    ModelContext,
    attach,
)
from zodex_gateway.context.tracker import SWITCH_KEYS


@pytest.fixture
def homes(tmp_path: Path) -> Homes:
    return make_homes(tmp_path)


@pytest.fixture
def full(homes: Homes, tmp_path: Path) -> Path:
    """Global instructions and skills in both roots, and a workdir with AGENTS.md and a skill."""
    (homes.codex / "AGENTS.md").write_text("Always run the tests.\n", encoding="utf-8")
    make_skill(homes.codex / "skills", "pdf", "pdf", "Reads PDFs.")
    make_skill(homes.home / ".agents" / "skills", "deploy", "deploy", "Ships it.")
    workdir = tmp_path / "work"
    make_skill(workdir / ".agents" / "skills", "lint", "lint", "Runs the linters.")
    (workdir / "AGENTS.md").write_text("repo rules", encoding="utf-8")
    return workdir


def provider(homes: Homes, **switches: bool) -> ContextProvider:
    return ContextProvider(env=homes.env, home=homes.home, switches=ContextSwitches(**switches))


def parts(context: ModelContext | None) -> set[str]:
    return set() if context is None else set(context.data)


def test_missing_everything_gives_none(homes: Homes, tmp_path: Path) -> None:
    assert provider(homes).for_call("a1b2", str(tmp_path), success=True) is None


def test_first_result_has_everything_with_the_documented_shape(homes: Homes, full: Path) -> None:
    context = provider(homes).for_call("a1b2", str(full), success=True)
    assert context is not None
    assert context.data == {
        "global_instructions": {
            "path": str(homes.codex / "AGENTS.md"),
            "text": "Always run the tests.",
            "truncated": False,
        },
        "global_skills": [
            {
                "name": "deploy",
                "description": "Ships it.",
                "path": str(homes.home / ".agents/skills/deploy/SKILL.md"),
            },
            {"name": "pdf", "description": "Reads PDFs.", "path": str(homes.codex / "skills/pdf/SKILL.md")},
        ],
        "workdir": {
            "path": str(full),
            "agents_files": [str(full / "AGENTS.md")],
            "skills": [
                {
                    "name": "lint",
                    "description": "Runs the linters.",
                    "path": str(full / ".agents/skills/lint/SKILL.md"),
                }
            ],
        },
    }
    text = context.text
    assert text.startswith(HEADER + "\n") and text.endswith("\n" + FOOTER)
    assert "Always run the tests." in text
    assert f"- pdf — Reads PDFs. — {homes.codex / 'skills/pdf/SKILL.md'}" in text
    assert f"This workdir has AGENTS.md ({full / 'AGENTS.md'})" in text
    assert f"- lint — Runs the linters. — {full / '.agents/skills/lint/SKILL.md'}" in text


def test_global_part_once_per_agent(homes: Homes, full: Path) -> None:
    zodex = provider(homes)
    assert "global_instructions" in parts(zodex.for_call("a1b2", None, success=True))
    assert zodex.for_call("a1b2", None, success=True) is None
    other = zodex.for_call("c3d4", None, success=True)
    assert parts(other) == {"global_instructions", "global_skills"}


def test_global_part_goes_with_an_error_result(homes: Homes, full: Path) -> None:
    zodex = provider(homes)
    first = zodex.for_call("a1b2", str(full), success=False)
    assert parts(first) == {"global_instructions", "global_skills"}  # no workdir part on failure
    second = zodex.for_call("a1b2", str(full), success=True)
    assert parts(second) == {"workdir"}


def test_workdir_part_once_per_agent_per_workdir(homes: Homes, full: Path, tmp_path: Path) -> None:
    zodex = provider(homes)
    assert "workdir" in parts(zodex.for_call("a1b2", str(full), success=True))
    assert zodex.for_call("a1b2", str(full), success=True) is None
    assert parts(zodex.for_call("c3d4", str(full), success=True)) == {
        "global_instructions",
        "global_skills",
        "workdir",
    }
    other = tmp_path / "other"
    other.mkdir()
    (other / "AGENTS.override.md").write_text("x", encoding="utf-8")
    again = zodex.for_call("a1b2", str(other), success=True)
    assert again is not None
    assert again.data == {
        "workdir": {"path": str(other), "agents_files": [str(other / "AGENTS.override.md")]}
    }


def test_an_empty_part_still_counts_as_delivered(homes: Homes, tmp_path: Path) -> None:
    zodex = provider(homes)
    assert zodex.for_call("a1b2", str(tmp_path), success=True) is None
    # Files appearing later are not delivered mid-conversation to the same agent...
    (homes.codex / "AGENTS.md").write_text("late", encoding="utf-8")
    (tmp_path / "AGENTS.md").write_text("late", encoding="utf-8")
    assert zodex.for_call("a1b2", str(tmp_path), success=True) is None
    # ...but a new agent reads them as they are now.
    assert parts(zodex.for_call("c3d4", str(tmp_path), success=True)) == {"global_instructions", "workdir"}


def test_calls_without_a_workdir_leave_the_workdir_part_due(homes: Homes, full: Path) -> None:
    zodex = provider(homes)
    zodex.for_call("a1b2", None, success=True)
    assert parts(zodex.for_call("a1b2", str(full), success=True)) == {"workdir"}


def test_unattributed_calls_get_nothing(homes: Homes, full: Path) -> None:
    zodex = provider(homes)
    assert zodex.for_call(None, str(full), success=True) is None
    assert zodex.for_call("", str(full), success=True) is None


@pytest.mark.parametrize(
    ("switch", "gone"),
    [
        ("global_instructions", ("global_instructions",)),
        ("global_skills", ("global_skills",)),
        ("workdir_hint", ("agents_files",)),
        ("workdir_skills", ("skills",)),
    ],
)
def test_each_switch_removes_exactly_its_part(
    homes: Homes, full: Path, switch: str, gone: tuple[str, ...]
) -> None:
    everything = provider(homes).for_call("a1b2", str(full), success=True)
    reduced = provider(homes, **{switch: False}).for_call("a1b2", str(full), success=True)
    assert everything is not None and reduced is not None

    def keys(context: ModelContext) -> set[str]:
        top = set(context.data) - {"workdir"}
        return top | set(context.data.get("workdir", {})) - {"path"}

    assert keys(everything) - keys(reduced) == set(gone)


def test_a_switched_off_part_is_not_consumed(homes: Homes, full: Path) -> None:
    off = ContextSwitches(
        global_instructions=False, global_skills=False, workdir_hint=False, workdir_skills=False
    )
    zodex = ContextProvider(env=homes.env, home=homes.home, switches=off)
    assert zodex.for_call("a1b2", str(full), success=True) is None
    assert not zodex._delivered  # nothing claimed, so turning a part on later would still deliver it


def test_switches_from_config() -> None:
    values = {"context.global-skills": False}
    switches = ContextSwitches.from_config(lambda key: values.get(key, True))
    assert switches == ContextSwitches(global_skills=False)
    assert set(SWITCH_KEYS.values()) == {
        "context.global-instructions",
        "context.global-skills",
        "context.workdir-hint",
        "context.workdir-skills",
    }


def test_concurrent_first_calls_deliver_once(homes: Homes, full: Path) -> None:
    zodex = provider(homes)
    results: list[ModelContext | None] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def call() -> None:
        start.wait()
        context = zodex.for_call("a1b2", str(full), success=True)
        with lock:
            results.append(context)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    delivered = [part for context in results for part in parts(context)]
    assert sorted(delivered) == ["global_instructions", "global_skills", "workdir"]


def test_attach_puts_the_result_first(homes: Homes, full: Path) -> None:
    context = provider(homes).for_call("a1b2", str(full), success=True)
    assert context is not None
    result = '{"summary": "exited 0 after 0.1s"}'
    combined = attach(result, context)
    assert combined == result + "\n\n" + context.text
    assert attach("patched\n", context) == "patched\n\n" + context.text


def test_truncated_instructions_carry_a_notice(homes: Homes) -> None:
    path = homes.codex / "AGENTS.override.md"
    path.write_text("y" * 40_000, encoding="utf-8")
    context = provider(homes).for_call("a1b2", None, success=False)
    assert context is not None
    data = context.data["global_instructions"]
    assert data["truncated"] is True
    assert data["omitted_bytes"] == 40_000 - len(data["text"])
    assert f"[… {data['omitted_bytes']:,} more bytes of {path} not shown (limit 32 KiB)" in context.text


def test_data_is_json_and_bounded_with_huge_skills(homes: Homes, tmp_path: Path) -> None:
    huge = "word " * 2_000  # fits in the header window, so it really is parsed and then cut
    for root in (homes.codex / "skills", homes.home / ".agents" / "skills"):
        for i in range(40):
            raw = f"---\nname: {i:02d}{'n' * 5000}\ndescription: >\n  {huge}\n---\n" + huge * 50
            make_skill(root, f"skill-{i:02d}", raw=raw)
    workdir = tmp_path / "work"
    for i in range(60):
        make_skill(workdir / ".agents" / "skills", f"w{i:02d}", f"w{i:02d}", huge)
    context = provider(homes).for_call("a1b2", str(workdir), success=True)
    assert context is not None
    assert len(context.data["global_skills"]) == 50
    assert context.data["global_skills_omitted"] == 30
    assert context.data["workdir"]["skills_omitted"] == 10
    first = context.data["global_skills"][0]
    assert first["name"].startswith("00n") and len(first["name"]) <= 100
    assert first["description"].startswith("word word") and len(first["description"]) <= 200
    encoded = json.dumps(context.data)
    assert len(encoded) < 64 * 1024
    assert len(context.text) < 64 * 1024
    assert "… and 30 more skills not listed" in context.text
    assert "… and 10 more skills not listed" in context.text
