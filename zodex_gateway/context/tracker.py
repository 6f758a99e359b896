"""Which context each agent still has to receive in this runtime (docs/agents.md#model-context).

- The global part (instructions, global skills) goes with an agent's **first result** in
  the runtime, success or error.
- The workdir part (AGENTS file hint, workdir skills) goes with an agent's **first
  successful call in that workdir**.
- Unattributed calls get nothing.

Delivery is tracked per part in memory, so a runtime is one process lifetime. A part is
marked delivered when it is due even if it turns out empty (no files): adding it later
would put it in the middle of a conversation, and re-reading on every call would cost I/O
for nothing. A part whose switch is off is never read and never marked.

Files are read when a part is due, not cached: a Local runtime lives for days, and a new
conversation should see the instructions and skills as they are now. Each part is read at
most once per call, and only for an agent that has not had it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.context.render import ModelContext, build
from zodex_gateway.context.sources import read_global_instructions, read_global_skills, read_workdir

SWITCH_KEYS = {
    "global_instructions": "context.global-instructions",
    "global_skills": "context.global-skills",
    "workdir_hint": "context.workdir-hint",
    "workdir_skills": "context.workdir-skills",
}
"""Switch field → config key."""


@dataclass(frozen=True)
class ContextSwitches:
    global_instructions: bool = True
    global_skills: bool = True
    workdir_hint: bool = True
    workdir_skills: bool = True

    @classmethod
    def from_config(cls, flag: Callable[[str], bool]) -> ContextSwitches:
        """From a switch lookup such as ``LocalConfig.flag`` (missing keys default to on)."""
        return cls(**{field: flag(key) for field, key in SWITCH_KEYS.items()})


class ContextProvider:
    """Hands each agent its context once; safe to call from threads and from one event loop."""

    def __init__(self, *, env: Mapping[str, str], home: Path, switches: ContextSwitches) -> None:
        self._env = dict(env)  # a snapshot: the runtime's environment is captured at start
        self._home = home
        self._switches = switches
        self._lock = threading.Lock()
        self._delivered: set[tuple[str, str, str]] = set()  # (part, agent, workdir or "")

    @property
    def switches(self) -> ContextSwitches:
        return self._switches

    def for_call(self, agent_id: str | None, workdir: str | None, *, success: bool) -> ModelContext | None:
        """The context to attach to this result, or ``None``; what it returns counts as delivered.

        ``workdir`` is the real path of the call's workdir, or ``None`` when the call has
        none (``write_stdin``, ``set_agent_alias``, or a failure before it was known).
        """
        if not agent_id:
            return None
        due = self._claim(agent_id, workdir if success else None)
        if not due:
            return None
        instructions = (
            read_global_instructions(self._env, self._home) if "global_instructions" in due else None
        )
        skills = read_global_skills(self._env, self._home) if "global_skills" in due else None
        place = None
        if workdir is not None and ("workdir_hint" in due or "workdir_skills" in due):
            place = read_workdir(workdir, hint="workdir_hint" in due, skills="workdir_skills" in due)
        return build(instructions, skills, place)

    def _claim(self, agent_id: str, workdir: str | None) -> set[str]:
        """Marks and returns the parts due now; the lock makes each part go out once under races."""
        switches = self._switches
        wanted = [
            ("global_instructions", "", switches.global_instructions),
            ("global_skills", "", switches.global_skills),
        ]
        if workdir is not None:
            wanted += [
                ("workdir_hint", workdir, switches.workdir_hint),
                ("workdir_skills", workdir, switches.workdir_skills),
            ]
        due: set[str] = set()
        with self._lock:
            for part, place, on in wanted:
                key = (part, agent_id, place)
                if on and key not in self._delivered:
                    self._delivered.add(key)
                    due.add(part)
        return due
