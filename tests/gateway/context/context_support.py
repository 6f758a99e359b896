"""Helpers for the context tests: a fake user under tmp_path, so no test reads the real home."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Homes:
    home: Path
    codex: Path
    env: dict[str, str]


def make_homes(tmp_path: Path) -> Homes:
    home = tmp_path / "home"
    codex = tmp_path / "codex-home"
    home.mkdir()
    codex.mkdir()
    return Homes(home, codex, {"CODEX_HOME": str(codex)})


def make_skill(
    root: Path,
    folder: str,
    name: str | None = None,
    description: str | None = None,
    *,
    raw: str | None = None,
) -> Path:
    """``root/folder/SKILL.md`` with the given front matter (or exactly ``raw``)."""
    directory = root / folder
    directory.mkdir(parents=True, exist_ok=True)
    if raw is None:
        header = ["---"]
        if name is not None:
            header.append(f"name: {name}")
        if description is not None:
            header.append(f"description: {description}")
        raw = "\n".join([*header, "---", "", "# Body", ""])
    path = directory / "SKILL.md"
    path.write_text(raw, encoding="utf-8")
    return path
