"""JSON shapes of agents and invocations, built from the history store's public records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from zodex_gateway.history import AgentRecord, FileChange, Invocation
from zodex_gateway.history.render import summary

API_SCHEMA_VERSION = 1
API_VERSION = 1


def iso_utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_running(process: dict[str, Any] | None) -> bool:
    return process is not None and process["started_at"] is not None and process["ended_at"] is None


def agent_entry(agent: AgentRecord, workdirs: Sequence[str], running: Mapping[str, int]) -> dict[str, Any]:
    """``workdirs``: most recently used first; ``running``: processes per agent."""
    return {
        "agent_id": agent.agent_id,
        "alias": agent.alias,
        "first_seen": iso_utc(agent.first_seen),
        "last_seen": iso_utc(agent.last_seen),
        "workdirs": list(workdirs),
        "active_processes": running.get(agent.agent_id, 0),
    }


def invocation_summary(inv: Invocation) -> dict[str, Any]:
    """A list entry: what was called, where, and how it ended, without the payloads."""
    return {
        "id": inv.id,
        "agent_id": inv.agent_id,
        "tool_name": inv.tool_name,
        "status": inv.status,
        "started_at": iso_utc(inv.started_at),
        "started_at_ms": round(inv.started_at * 1000),
        "duration_ms": inv.duration_ms,
        "workdir": inv.declared_workdir,
        "real_workdir": inv.real_workdir,
        "summary": summary(inv),
        "session_handle": inv.session_handle,
        "by": inv.by,
    }


def invocation_detail(inv: Invocation) -> dict[str, Any]:
    entry = invocation_summary(inv)
    entry.update(
        args=inv.args,
        result=inv.result,
        error=inv.error,
        handle_creator=inv.handle_creator,
        cross_agent=inv.cross_agent,
        incomplete_reason=inv.incomplete_reason,
        files=[file_entry(change, diffs=True) for change in inv.files],
    )
    return entry


# The patch applier's names for what happened to a file, in the words a person reads.
_OPERATIONS = {"add": "created", "update": "edited", "delete": "deleted", "move": "renamed"}
MAX_DIFF_ROWS = 2000


def file_entry(change: FileChange, *, diffs: bool) -> dict[str, Any]:
    operation = _OPERATIONS.get(change.operation, change.operation)
    if change.old_path is not None and change.old_path != change.path:
        operation = "renamed"
    entry: dict[str, Any] = {
        "operation": operation,
        "path": change.path,
        "old_path": change.old_path,
        "added": change.added,
        "removed": change.removed,
    }
    if diffs:
        entry["diff"] = list(change.diff[:MAX_DIFF_ROWS])
        entry["diff_truncated"] = len(change.diff) > MAX_DIFF_ROWS
    return entry
