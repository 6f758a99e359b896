"""The context as the model receives it: a ``zodex_context`` object and the same as text.

Shape of ``data`` (every key is present only when its part has content; no ``null``s)::

    {
      "global_instructions": {"path": str, "text": str, "truncated": bool,
                              "omitted_bytes": int},          # omitted_bytes only if truncated
      "global_skills": [{"name": str, "description": str, "path": str}, ...],   # ≤ 50
      "global_skills_omitted": int,                           # only when the catalog was cut
      "workdir": {"path": str,
                  "agents_files": [str, ...],                 # absolute, override first
                  "skills": [{"name", "description", "path"}, ...],             # ≤ 50
                  "skills_omitted": int}                      # only when the catalog was cut
    }
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zodex_gateway.context.skills import Skill, SkillCatalog
from zodex_gateway.context.sources import (
    INSTRUCTIONS_LIMIT,
    Instructions,
    WorkdirInfo,
    workdir_skill_root,
)

STRUCTURED_KEY = "zodex_context"
"""The ``structuredContent`` key that carries ``ModelContext.data``."""
HEADER = "--- Zodex context ---"
FOOTER = "--- end of Zodex context ---"


@dataclass(frozen=True)
class ModelContext:
    data: dict[str, Any]
    """JSON-ready; goes under ``zodex_context`` in ``structuredContent``."""
    text: str
    """The same, readable; appended after the result in text blocks (see ``attach``)."""


def attach(result_text: str, context: ModelContext) -> str:
    """The result unchanged, then a blank line, then the context (docs/agents.md#model-context)."""
    separator = "\n" if result_text.endswith("\n") else "\n\n"
    return result_text + separator + context.text


def build(
    instructions: Instructions | None = None,
    global_skills: SkillCatalog | None = None,
    workdir: WorkdirInfo | None = None,
) -> ModelContext | None:
    """The context made of the parts that have content, or ``None`` when none has."""
    data: dict[str, Any] = {}
    sections: list[str] = []
    if instructions is not None:
        data["global_instructions"] = _instructions_data(instructions)
        sections.append(_instructions_text(instructions))
    if global_skills is not None and global_skills.skills:
        data["global_skills"] = [_skill_data(skill) for skill in global_skills.skills]
        if global_skills.omitted:
            data["global_skills_omitted"] = global_skills.omitted
        title = "Global skills (name — description — path); read a skill's SKILL.md before you use it:"
        sections.append(_catalog_text(title, global_skills))
    if workdir is not None and not workdir.empty:
        data["workdir"] = _workdir_data(workdir)
        sections.append(_workdir_text(workdir))
    if not sections:
        return None
    return ModelContext(data, "\n\n".join([HEADER, *sections, FOOTER]))


def _instructions_data(instructions: Instructions) -> dict[str, Any]:
    data: dict[str, Any] = {
        "path": instructions.path,
        "text": instructions.text,
        "truncated": instructions.truncated,
    }
    if instructions.truncated:
        data["omitted_bytes"] = instructions.omitted_bytes
    return data


def _instructions_text(instructions: Instructions) -> str:
    lines = [f"Global instructions from the user ({instructions.path}):", instructions.text]
    if instructions.truncated:
        lines.append(
            f"[… {instructions.omitted_bytes:,} more bytes of {instructions.path} not shown "
            f"(limit {INSTRUCTIONS_LIMIT // 1024} KiB); read the file for the rest]"
        )
    return "\n".join(lines)


def _skill_data(skill: Skill) -> dict[str, str]:
    return {"name": skill.name, "description": skill.description, "path": skill.path}


def _catalog_text(title: str, catalog: SkillCatalog) -> str:
    lines = [title]
    lines.extend(
        f"- {skill.name} — {skill.description or '(no description)'} — {skill.path}"
        for skill in catalog.skills
    )
    if catalog.omitted:
        lines.append(f"… and {catalog.omitted} more skills not listed")
    return "\n".join(lines)


def _workdir_data(workdir: WorkdirInfo) -> dict[str, Any]:
    data: dict[str, Any] = {"path": workdir.path}
    if workdir.agents_files:
        data["agents_files"] = list(workdir.agents_files)
    if workdir.skills.skills:
        data["skills"] = [_skill_data(skill) for skill in workdir.skills.skills]
        if workdir.skills.omitted:
            data["skills_omitted"] = workdir.skills.omitted
    return data


def _workdir_text(workdir: WorkdirInfo) -> str:
    parts = [f"Workdir {workdir.path}:"]
    if workdir.agents_files:
        parts.append(_agents_line(workdir.agents_files))
    if workdir.skills.skills:
        root = workdir_skill_root(Path(workdir.path))
        parts.append(_catalog_text(f"Skills in {root} (name — description — path):", workdir.skills))
    return "\n".join(parts)


def _agents_line(paths: tuple[str, ...]) -> str:
    first = Path(paths[0]).name
    named = f"{first} ({paths[0]})"
    if len(paths) > 1:  # both files: Codex reads only the override
        named += f", which takes precedence over its {Path(paths[1]).name} ({paths[1]})"
    return f"This workdir has {named}: read it before you change anything."
