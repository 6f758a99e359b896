"""Presentation records: the timeline a person reads, folded from raw invocations.

An ``exec_command`` becomes a ``command`` record; the empty ``write_stdin`` polls of its
session (by the same agent) fold into it, counted in ``poll_count``, and every later
``write_stdin`` result for the session updates its status. Typing and killing stay
records of their own (``stdin``, ``kill``) because they are actions, not polling. A
successful ``apply_patch`` becomes ``file_changes``; anything else, failed calls
included, is ``generic``. A record's ``presentation_id`` is the id of the invocation
that started it, so it is stable while later calls update the record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from zodex_gateway.history import BY_PERSON, ERROR, OK, PENDING, HistoryStore, Invocation, agent_matches
from zodex_gateway.history.render import summary
from zodex_gateway.observer.display import shown_text
from zodex_gateway.observer.views import file_entry, is_running, iso_utc
from zodex_gateway.redaction import SECRETS, SecretRegistry

OUTPUT_TAIL_CHARS: Final = 4000
# Raw characters cleaned to find the tail: escapes and overwritten lines shrink the text.
_RAW_TAIL_CHARS: Final = 64 * 1024


@dataclass
class Presentation:
    first: Invocation
    kind: str
    target: str | None = None  # the session handle a command created or a stdin/kill targeted
    workdirs: set[str] = field(default_factory=set)
    invocation_ids: list[str] = field(default_factory=list)
    latest: Invocation | None = None  # the newest call that reported on a command's session
    poll_count: int = 0
    updated_at: float = 0.0

    @property
    def presentation_id(self) -> str:
        return self.first.id

    @property
    def key(self) -> tuple[float, str]:
        return (self.first.started_at, self.first.id)

    def absorb(self, inv: Invocation) -> None:
        self.invocation_ids.append(inv.id)
        self.workdirs.update(w for w in (inv.declared_workdir, inv.real_workdir) if w)
        self.updated_at = max(self.updated_at, _finished_at(inv))


def _finished_at(inv: Invocation) -> float:
    return inv.started_at + (inv.duration_ms or 0) / 1000


def _new(inv: Invocation, kind: str, target: str | None = None) -> Presentation:
    record = Presentation(first=inv, kind=kind, target=target, latest=inv)
    record.absorb(inv)
    return record


def build(invocations: Sequence[Invocation]) -> list[Presentation]:
    """``invocations`` oldest first (all agents, so cross-agent calls resolve); the
    records come back newest first."""
    commands: dict[str, Presentation] = {}
    records: list[Presentation] = []
    for inv in invocations:
        if inv.tool_name == "exec_command" and inv.status != ERROR:
            record = _new(inv, "command", inv.session_handle)
            if inv.session_handle:
                commands[inv.session_handle] = record
        elif inv.tool_name == "write_stdin" and inv.status != ERROR:
            handle = inv.session_handle or _text(inv.args.get("session_handle"))
            command = commands.get(handle) if handle else None
            if command is not None and command.first.agent_id != inv.agent_id:
                command = None  # another agent's session: its call stays a record of its own
            if command is not None and inv.by != BY_PERSON:
                # A person's input carries no result of the command: it never is its latest.
                command.latest = inv
                command.absorb(inv)
            if inv.args.get("kill_process"):
                record = _new(inv, "kill", handle)
            elif inv.args.get("chars"):
                record = _new(inv, "stdin", handle)
            elif command is not None:
                command.poll_count += 1
                continue
            else:
                record = _new(inv, "generic", handle)
            if command is not None:
                record.workdirs.update(command.workdirs)
        elif inv.tool_name == "apply_patch" and inv.status == OK and inv.files:
            record = _new(inv, "file_changes")
        else:
            record = _new(inv, "generic")
        records.append(record)
    records.sort(key=lambda record: record.key, reverse=True)
    return records


def _is_fold_candidate(inv: Invocation) -> bool:
    """An empty ``write_stdin`` poll: it folds into its command when that is the caller's."""
    return (
        inv.tool_name == "write_stdin"
        and inv.status != ERROR
        and not inv.args.get("kill_process")
        and not inv.args.get("chars")
    )


def _target(inv: Invocation) -> str | None:
    handle = inv.session_handle or _text(inv.args.get("session_handle"))
    return handle or None


class TimelineReader:
    """Builds just the records asked for, from indexed queries: a page never reads the
    whole history. A command record reads the calls on its session (one query by handle)."""

    # Calls are read in batches of this many per page step.
    BATCH = 200
    # A call started this long before a recovery point may still have finished after it:
    # the longest a call can wait (yield clamp 60 s) plus slack for a slow answer.
    LONGEST_CALL_S = 120.0

    def __init__(self, store: HistoryStore) -> None:
        self._store = store

    def anchor_of(self, inv: Invocation) -> str:
        """The presentation id of the record ``inv`` belongs to."""
        if _is_fold_candidate(inv):
            command = self._command_of(inv)
            if command is not None:
                return command.id
        return inv.id

    def record(self, presentation_id: str) -> Presentation | None:
        first = self._store.invocation(presentation_id)
        if first is None or self.anchor_of(first) != presentation_id:
            return None  # no such call, or a poll folded into its command
        return self._build(first)

    def page(
        self,
        *,
        agent_id: str | None,
        workdir: str | None,
        before: tuple[float, str] | None,
        limit: int,
    ) -> tuple[list[Presentation], bool]:
        """Up to ``limit`` records newest first, started before ``before``; and whether
        there are more."""
        found: list[Presentation] = []
        cursor = before
        while len(found) <= limit:
            # A workdir filter is applied to built records: a stdin or kill record has no
            # workdir of its own and takes its command's.
            batch = self._store.invocations(last=self.BATCH, agent_id=agent_id, before=cursor)
            if not batch:
                break
            for inv in reversed(batch):
                if self.anchor_of(inv) != inv.id:
                    continue
                record = self._build(inv)
                if record is not None and (workdir is None or workdir in record.workdirs):
                    found.append(record)
            cursor = (batch[0].started_at, batch[0].id)
            if len(batch) < self.BATCH:
                break
        return found[:limit], len(found) > limit

    def changed_since(self, since: float, *, agent_id: str | None, workdir: str | None) -> list[Presentation]:
        """Every record created or updated at or after ``since``, newest first: what a
        viewer missed while it was away."""
        anchors: set[str] = set()
        for inv in self._store.invocations(since_or_pending=since - self.LONGEST_CALL_S):
            if inv.status == PENDING or _finished_at(inv) >= since:
                anchors.add(self.anchor_of(inv))
        for handle in self._store.processes_changed_since(since):
            process = self._store.process(handle)
            if process is not None and process["creator_invocation_id"]:
                anchors.add(str(process["creator_invocation_id"]))
        records = []
        for presentation_id in anchors:
            record = self.record(presentation_id)
            if record is None:
                continue
            if not agent_matches(agent_id, record.first.agent_id):
                continue
            if workdir is not None and workdir not in record.workdirs:
                continue
            records.append(record)
        records.sort(key=lambda record: record.key, reverse=True)
        return records

    def _command_of(self, inv: Invocation) -> Invocation | None:
        handle = _target(inv)
        process = self._store.process(handle) if handle else None
        creator = process and process["creator_invocation_id"]
        command = self._store.invocation(str(creator)) if creator else None
        if command is None or command.status == ERROR or command.agent_id != inv.agent_id:
            return None  # another agent's session: its call stays a record of its own
        return command

    def _build(self, first: Invocation) -> Presentation | None:
        related = [first]
        handle = first.session_handle if first.tool_name == "exec_command" else _target(first)
        if handle is not None:
            on_session = self._store.invocations(session_handle=handle)
            if first.tool_name == "exec_command":
                related = on_session
            else:
                # A stdin or kill record takes its command's workdirs: build with the command.
                command = self._command_of(first)
                related = [c for c in on_session if command is not None and c.id == command.id]
                related.append(first)
        if first not in related:
            related.append(first)
        related.sort(key=lambda inv: (inv.started_at, inv.id))
        for record in build(related):
            if record.presentation_id == first.id:
                return record
        return None


def to_json(
    store: HistoryStore, record: Presentation, *, diffs: bool, secrets: SecretRegistry = SECRETS
) -> dict[str, Any]:
    inv = record.first
    entry: dict[str, Any] = {
        "presentation_id": record.presentation_id,
        "agent_id": inv.agent_id,
        "kind": record.kind,
        "started_at": iso_utc(inv.started_at),
        "started_at_ms": round(inv.started_at * 1000),
        "workdir": inv.real_workdir or inv.declared_workdir,
        "invocation_ids": list(record.invocation_ids),
        "by": inv.by,
    }
    updated_at = record.updated_at
    if record.kind == "command":
        fields, ended_at = _command_fields(store, record, secrets)
        entry.update(fields)
        updated_at = max(updated_at, ended_at or 0.0)
    else:
        entry.update(status=inv.status, summary=summary(inv))
        if record.kind == "file_changes":
            entry["files"] = [file_entry(change, diffs=diffs) for change in inv.files]
        elif record.kind in ("stdin", "kill"):
            entry["session_handle"] = record.target
            if record.kind == "stdin":
                entry["chars"] = _text(inv.args.get("chars"))
        else:
            entry.update(tool_name=inv.tool_name, error=inv.error)
    entry["updated_at"] = iso_utc(updated_at)
    entry["updated_at_ms"] = round(updated_at * 1000)
    return entry


def _command_fields(
    store: HistoryStore, record: Presentation, secrets: SecretRegistry
) -> tuple[dict[str, Any], float | None]:
    inv = record.first
    latest = record.latest or inv
    result = latest.result if isinstance(latest.result, dict) else {}
    process = store.process(record.target) if record.target else None
    ended = process is not None and process["ended_at"] is not None
    if inv.status == PENDING or is_running(process):
        status = "running"
    elif ended:
        status = "exited"
    else:
        status = str(result.get("status") or "exited")
    exit_code = process["exit_code"] if ended and process else result.get("exit_code")
    reason = result.get("termination_reason")
    if ended and process and process["reason"]:
        reason = process["reason"]
    duration_ms = result.get("wall_time_ms", latest.duration_ms)
    if ended and process and process["started_at"] is not None:
        duration_ms = round((process["ended_at"] - process["started_at"]) * 1000)
    cwd = result.get("cwd") or (process and process["cwd"]) or inv.real_workdir or inv.declared_workdir
    tail, truncated = output_tail(store, record.target, result, ended=status != "running", secrets=secrets)
    fields = {
        "command": _text(inv.args.get("cmd")),
        "status": status,
        "cwd": cwd,
        "exit_code": exit_code if status == "exited" else None,
        "termination_reason": reason if status == "exited" else None,
        "duration_ms": duration_ms,
        "output_tail": tail,
        "output_truncated": truncated,
        "poll_count": record.poll_count,
        "session_handle": record.target,
        "waiting_for": _waiting_for(latest) if status == "running" else None,
        "screen": _screen(result) if status == "running" else None,
    }
    return fields, process["ended_at"] if ended and process else None


def _waiting_for(latest: Invocation) -> str | None:
    """The pattern the call now waiting on the command waits for (docs/tools.md#waiting-for-output)."""
    pattern = latest.args.get("wait_for") if latest.status == PENDING else None
    return pattern if isinstance(pattern, str) else None


def _screen(result: dict[str, Any]) -> dict[str, Any] | None:
    """The screen the latest result on a running command showed (docs/output.md#screens)."""
    screen = result.get("screen")
    return screen if isinstance(screen, dict) else None


def output_tail(
    store: HistoryStore,
    handle: str | None,
    result: dict[str, Any],
    *,
    ended: bool,
    secrets: SecretRegistry = SECRETS,
) -> tuple[str, bool]:
    """The last cleaned, redacted characters of a command's output (≤ OUTPUT_TAIL_CHARS),
    and whether older output was left out."""
    if handle:
        raw, older = store.output_tail(handle, _RAW_TAIL_CHARS)
    else:
        raw, older = _text(result.get("output")), False
    cut = older or len(raw) > _RAW_TAIL_CHARS
    if cut:
        raw = raw[-_RAW_TAIL_CHARS:]
        # Start at a line boundary, so no escape sequence is entered halfway.
        newline = raw.find("\n")
        raw = raw[newline + 1 :] if newline >= 0 else raw
    text = shown_text(raw, ended=ended, secrets=secrets)
    if len(text) > OUTPUT_TAIL_CHARS:
        return text[-OUTPUT_TAIL_CHARS:], True
    return text, cut


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
