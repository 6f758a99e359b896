"""Context for the model (docs/agents.md#model-context, Local only).

``ContextProvider.for_call`` decides, per tool result, which parts an agent still needs
(global instructions and skills once per runtime, the workdir hint and skills once per
workdir) and returns them as a ``ModelContext``: ``data`` for ``structuredContent`` under
``STRUCTURED_KEY`` and ``text`` to ``attach`` after the result's text. The context is for
the model only; callers keep it out of stored history.
"""

from zodex_gateway.context.render import FOOTER, HEADER, STRUCTURED_KEY, ModelContext, attach, build
from zodex_gateway.context.skills import Skill, SkillCatalog, scan_catalog
from zodex_gateway.context.sources import (
    INSTRUCTIONS_LIMIT,
    Instructions,
    WorkdirInfo,
    codex_home,
    read_global_instructions,
    read_global_skills,
    read_workdir,
)
from zodex_gateway.context.tracker import SWITCH_KEYS, ContextProvider, ContextSwitches

__all__ = [
    "FOOTER",
    "HEADER",
    "INSTRUCTIONS_LIMIT",
    "STRUCTURED_KEY",
    "SWITCH_KEYS",
    "ContextProvider",
    "ContextSwitches",
    "Instructions",
    "ModelContext",
    "Skill",
    "SkillCatalog",
    "WorkdirInfo",
    "attach",
    "build",
    "codex_home",
    "read_global_instructions",
    "read_global_skills",
    "read_workdir",
    "scan_catalog",
]
