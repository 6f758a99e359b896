"""What the terminal viewer knows: agents and timeline records as the observer serves them,
kept current by events. Pure data, no terminal and no network, so it is tested directly.

Records are upserted by ``presentation_id``; a copy older than the one held (by
``updated_at_ms``) is ignored, so a recovery page fetched after a live update cannot undo
it. ``output`` events append to the ``output_tail`` of the running command that owns the
session until the next ``presentation_updated`` replaces the record wholesale.

Calls with no agent (``agent_id`` null) are shown as one more entry beside the agents,
"Unattributed", under the observer's filter word :data:`NO_AGENT`, as soon as a record of
one is known.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from zodex_gateway.history import NO_AGENT
from zodex_gateway.viewers.tui.client import ServerEvent

OUTPUT_TAIL_CHARS: Final = 4000  # what the observer keeps in a record's output_tail

Record = dict[str, Any]
Agent = dict[str, Any]


@dataclass
class Paging:
    """How far one view (an agent, or all agents under the key None) has been read back."""

    loaded: bool = False
    next_cursor: str | None = None


@dataclass
class Board:
    agents: dict[str, Agent] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)
    # Bumped on every change of a record: the viewer re-renders only what moved.
    revisions: dict[str, int] = field(default_factory=dict)
    selected: str | None = None  # the agent (or NO_AGENT) whose records are shown, unless show_all
    show_all: bool = False
    paging: dict[str | None, Paging] = field(default_factory=dict)
    # Agents whose active_processes may have changed: the viewer re-reads them.
    stale_agents: set[str] = field(default_factory=set)
    _handles: dict[str, str] = field(default_factory=dict)
    _output_seq: dict[str, int] = field(default_factory=dict)
    _revision: int = 0

    # --- agents -------------------------------------------------------------------------

    def set_agents(self, agents: Iterable[Agent]) -> None:
        for agent in agents:
            self.upsert_agent(agent)

    def upsert_agent(self, agent: Agent) -> None:
        agent_id = agent.get("agent_id")
        if isinstance(agent_id, str):
            self.agents[agent_id] = dict(agent)
            self.stale_agents.discard(agent_id)

    def agents_by_recency(self) -> list[Agent]:
        """The agents, and the unattributed calls as an entry of their own (``agent_id``
        :data:`NO_AGENT`, ``unattributed`` true) once one is known, most recent first."""
        entries = list(self.agents.values())
        unattributed = self.unattributed()
        if unattributed is not None:
            entries.append(unattributed)
        # ISO-8601 UTC strings of one format sort like the times they name.
        return sorted(entries, key=lambda a: (str(a.get("last_seen") or ""), a["agent_id"]), reverse=True)

    def unattributed(self) -> Agent | None:
        """The entry standing for the calls with no agent: None while none is known."""
        records = [r for r in self.records.values() if r.get("agent_id") is None]
        if not records and self.selected != NO_AGENT:
            return None
        last_seen = max((str(r.get("updated_at") or "") for r in records), default="")
        running = sum(1 for r in records if r.get("kind") == "command" and r.get("status") == "running")
        return {
            "agent_id": NO_AGENT,
            "unattributed": True,
            "alias": None,
            "last_seen": last_seen,
            "workdirs": [],
            "active_processes": running,
        }

    def ensure_selection(self) -> bool:
        """Pick the most recently seen agent (or the unattributed calls, when they are more
        recent) when none is chosen; True if it changed."""
        if self.show_all or self.selected is not None:
            return False
        entries = self.agents_by_recency()
        if not entries:
            return False
        self.selected = entries[0]["agent_id"]
        return True

    @property
    def view_key(self) -> str | None:
        return None if self.show_all else self.selected

    # --- records ------------------------------------------------------------------------

    def upsert_records(self, records: Iterable[Record]) -> bool:
        changed = False
        for record in records:
            changed = self.upsert_record(record) or changed
        return changed

    def upsert_record(self, record: Record) -> bool:
        presentation_id = record.get("presentation_id")
        if not isinstance(presentation_id, str):
            return False
        held = self.records.get(presentation_id)
        if held is not None and _int(held.get("updated_at_ms")) > _int(record.get("updated_at_ms")):
            return False
        if held == record:
            return False
        self.records[presentation_id] = dict(record)
        handle = record.get("session_handle")
        if record.get("kind") == "command" and isinstance(handle, str):
            self._handles[handle] = presentation_id
        self._touch(presentation_id)
        return True

    def record_for_handle(self, handle: str | None) -> Record | None:
        presentation_id = self._handles.get(handle) if handle else None
        return self.records.get(presentation_id) if presentation_id else None

    def revision(self, presentation_id: str) -> int:
        return self.revisions.get(presentation_id, 0)

    def _touch(self, presentation_id: str) -> None:
        self._revision += 1
        self.revisions[presentation_id] = self._revision

    # --- events -------------------------------------------------------------------------

    def apply(self, event: ServerEvent) -> bool:
        """Fold one event in; True if something shown may have changed. ``gap`` is not
        handled here: recovering needs the network (see :mod:`.live`)."""
        payload = event.payload
        kind = event.event_type
        if kind in ("agent_first_seen", "agent_updated"):
            self.upsert_agent(payload)
            return True
        if kind == "presentation_updated":
            return self.upsert_record(payload)
        if kind == "output":
            return self._append_output(event)
        if kind in ("process_started", "process_ended"):
            if event.agent_id:
                self.stale_agents.add(event.agent_id)
            if kind == "process_ended":
                return self._process_ended(payload)
            return False
        return False

    def _append_output(self, event: ServerEvent) -> bool:
        payload = event.payload
        handle = payload.get("session_handle")
        record = self.record_for_handle(handle if isinstance(handle, str) else None)
        if record is None and event.presentation_id:
            record = self.records.get(event.presentation_id)
        text = payload.get("display_text")
        if record is None or not isinstance(text, str) or not text:
            return False
        seq = payload.get("seq")
        if isinstance(handle, str) and isinstance(seq, int):
            if seq <= self._output_seq.get(handle, -1):
                return False  # already folded in (a resumed stream can repeat a frame)
            self._output_seq[handle] = seq
        tail = str(record.get("output_tail") or "") + text
        if len(tail) > OUTPUT_TAIL_CHARS:
            tail = tail[-OUTPUT_TAIL_CHARS:]
            record["output_truncated"] = True
        record["output_tail"] = tail
        self._touch(record["presentation_id"])
        return True

    def _process_ended(self, payload: dict[str, Any]) -> bool:
        handle = payload.get("session_handle")
        record = self.record_for_handle(handle if isinstance(handle, str) else None)
        if record is None or record.get("status") == "exited":
            return False
        # A provisional end: the presentation_updated that follows carries the stored one.
        record["status"] = "exited"
        record["exit_code"] = payload.get("exit_code")
        record["termination_reason"] = payload.get("reason")
        ended = payload.get("ended_at_ms")
        if isinstance(ended, int) and isinstance(record.get("started_at_ms"), int):
            record["duration_ms"] = max(0, ended - record["started_at_ms"])
        self._touch(record["presentation_id"])
        return True

    # --- what is shown ------------------------------------------------------------------

    def view(self, query: str = "") -> list[Record]:
        """The records of the selected agent (or all), newest first, filtered by ``query``."""
        needle = query.casefold().strip()
        shown = [
            record
            for record in self.records.values()
            if (self.show_all or (record.get("agent_id") or NO_AGENT) == self.selected)
            and (not needle or needle in search_text(record))
        ]
        shown.sort(key=lambda r: (_int(r.get("started_at_ms")), str(r["presentation_id"])), reverse=True)
        return shown

    def running_count(self, agent_id: str) -> int:
        return sum(
            1
            for record in self.records.values()
            if record.get("agent_id") == agent_id
            and record.get("kind") == "command"
            and record.get("status") == "running"
        )


def search_text(record: Record) -> str:
    """Everything a person could be looking for in a record, case-folded."""
    parts = [
        record.get(name)
        for name in (
            "kind",
            "command",
            "cwd",
            "workdir",
            "output_tail",
            "summary",
            "chars",
            "error",
            "tool_name",
            "session_handle",
            "agent_id",
        )
    ]
    for entry in record.get("files") or []:
        if isinstance(entry, dict):
            parts.extend([entry.get("path"), entry.get("old_path"), entry.get("operation")])
    return "\n".join(part for part in parts if isinstance(part, str)).casefold()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
