"""Where the model's context comes from: the user's Codex home, ``~/.agents`` and the workdir.

Pure functions of ``env``, ``home`` and the file system; every read is bounded and a file
that cannot be read counts as absent, so none of them raises on the user's files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.context.files import cut_utf8, read_prefix
from zodex_gateway.context.skills import SkillCatalog, scan_catalog

INSTRUCTIONS_LIMIT = 32 * 1024
OVERRIDE_FILE = "AGENTS.override.md"
AGENTS_FILE = "AGENTS.md"
AGENTS_FILES = (OVERRIDE_FILE, AGENTS_FILE)
"""Instruction files in order of precedence, as Codex reads them."""


@dataclass(frozen=True)
class Instructions:
    path: str
    """Absolute path of the file the text came from."""
    text: str
    """The file's text (stripped), cut to the limit; undecodable bytes replaced."""
    omitted_bytes: int
    """Bytes of the file left out by the cut; 0 when it is whole."""

    @property
    def truncated(self) -> bool:
        return self.omitted_bytes > 0


@dataclass(frozen=True)
class WorkdirInfo:
    path: str
    agents_files: tuple[str, ...]
    """Absolute paths of the workdir's instruction files, override first; empty when none (or hint off)."""
    skills: SkillCatalog
    """Skills under ``<workdir>/.agents/skills``; empty when none (or switched off)."""

    @property
    def empty(self) -> bool:
        return not self.agents_files and not self.skills.skills


def codex_home(env: Mapping[str, str], home: Path) -> Path:
    """``$CODEX_HOME``, else ``~/.codex``.

    ``~`` is expanded against ``home``, and a relative value is taken from ``home`` too:
    the runtime's own working directory means nothing to the user.
    """
    raw = env.get("CODEX_HOME", "").strip()
    if not raw:
        return home / ".codex"
    if raw == "~" or raw.startswith(("~/", "~" + os.sep)):
        return home / raw[2:]
    path = Path(raw)
    return path if path.is_absolute() else home / path


def read_global_instructions(
    env: Mapping[str, str], home: Path, limit: int = INSTRUCTIONS_LIMIT
) -> Instructions | None:
    """``$CODEX_HOME/AGENTS.override.md``, else ``$CODEX_HOME/AGENTS.md``, bounded to ``limit`` bytes.

    Like Codex, a file that is empty (or only whitespace) or unreadable does not count, so an
    empty override does not hide ``AGENTS.md``.
    """
    base = codex_home(env, home)
    for name in AGENTS_FILES:
        path = base / name
        prefix = read_prefix(path, limit)
        if prefix is None:
            continue
        kept = cut_utf8(prefix.data, limit)
        text = kept.decode("utf-8", "replace").removeprefix("\ufeff").strip()
        if text:
            return Instructions(str(path), text, prefix.size - len(kept))
    return None


def global_skill_roots(env: Mapping[str, str], home: Path) -> tuple[Path, ...]:
    return (codex_home(env, home) / "skills", home / ".agents" / "skills")


def read_global_skills(env: Mapping[str, str], home: Path) -> SkillCatalog:
    return scan_catalog(global_skill_roots(env, home))


def workdir_skill_root(workdir: Path) -> Path:
    return workdir / ".agents" / "skills"


def read_workdir(workdir: str, *, hint: bool = True, skills: bool = True) -> WorkdirInfo:
    """What the workdir offers the model; a part switched off is not looked at."""
    base = Path(workdir)
    agents = tuple(str(base / name) for name in AGENTS_FILES if os.path.isfile(base / name)) if hint else ()
    catalog = scan_catalog([workdir_skill_root(base)]) if skills else SkillCatalog((), 0)
    return WorkdirInfo(workdir, agents, catalog)
