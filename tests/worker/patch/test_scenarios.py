"""Runs every scenario of scenarios.toml (the format is described at its top)."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest

from zodex_worker.patch import apply_patch

SCENARIO_FILE = Path(__file__).with_name("scenarios.toml")
SCENARIOS: list[dict[str, Any]] = tomllib.loads(SCENARIO_FILE.read_text("utf-8"))["scenario"]
KNOWN_KEYS = {
    "name", "patch", "patch_crlf", "ok", "text", "contains", "dirs", "files", "files_hex",
    "modes", "expect", "absent", "expect_modes",
}  # fmt: skip


def _snapshot(root: Path, workdir: Path) -> dict[str, bytes]:
    """Every file under `root`, keyed by its path relative to the workdir."""
    found: dict[str, bytes] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            full = Path(directory, name)
            found[Path(os.path.relpath(full, workdir)).as_posix()] = full.read_bytes()
    return found


def test_scenario_file_is_well_formed() -> None:
    names = [scenario["name"] for scenario in SCENARIOS]
    assert len(names) == len(set(names)), "scenario names must be unique"
    assert len(names) >= 40
    for scenario in SCENARIOS:
        assert set(scenario) <= KNOWN_KEYS, (scenario["name"], set(scenario) - KNOWN_KEYS)
        # Every scenario checks the result text, not only the files.
        assert "text" in scenario or "contains" in scenario, scenario["name"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(scenario: dict[str, Any], tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()

    def sub(text: str) -> str:
        return text.replace("@WORKDIR@", str(workdir))

    for directory in scenario.get("dirs", []):
        (workdir / directory).mkdir(parents=True)
    inputs: dict[str, bytes] = {
        path: text.encode("utf-8") for path, text in scenario.get("files", {}).items()
    }
    inputs.update({path: bytes.fromhex(data) for path, data in scenario.get("files_hex", {}).items()})
    for path, data in inputs.items():
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        (workdir / path).write_bytes(data)
    for path, mode in scenario.get("modes", {}).items():
        os.chmod(workdir / path, mode)
    before = _snapshot(tmp_path, workdir)

    patch = sub(scenario["patch"])
    if scenario.get("patch_crlf"):
        patch = patch.replace("\n", "\r\n")
    outcome = apply_patch(patch, str(workdir))

    assert outcome.ok is scenario["ok"], outcome.text
    if "text" in scenario:
        assert outcome.text == sub(scenario["text"]).removesuffix("\n")
    for expected in scenario.get("contains", []):
        assert sub(expected) in outcome.text
    if not outcome.ok and outcome.text.startswith("Invalid patch"):
        assert outcome.files == ()

    wanted = dict(before)
    wanted.update({path: text.encode("utf-8") for path, text in scenario.get("expect", {}).items()})
    for path in scenario.get("absent", []):
        wanted.pop(path, None)
    after = _snapshot(tmp_path, workdir)
    assert after == wanted
    for path, mode in scenario.get("expect_modes", {}).items():
        assert stat.S_IMODE(os.stat(workdir / path).st_mode) == mode
