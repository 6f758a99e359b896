"""Invocations as JSON or Markdown, for ``zodex local history`` (the click layer is apart).

JSON is for programs: every invocation with stable keys, times in ISO 8601 UTC. Markdown
is for a person: one heading per call, then what it did and how it ended, compactly.
``raw`` adds the exact stored arguments and result to either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any, Final

from zodex_gateway.history.records import (
    BY_PERSON,
    ERROR,
    INCOMPLETE,
    PENDING,
    AgentRecord,
    FileChange,
    Invocation,
)

OUTPUT_TAIL_LINES: Final = 20
LINE_WIDTH: Final = 200  # longer output lines are cut in Markdown (never in --raw)


def summary(invocation: Invocation) -> str:
    """One line: the result's own summary, a patch result's first line, or the error."""
    if invocation.status == PENDING:
        return "in progress"
    if invocation.status == INCOMPLETE:
        return invocation.incomplete_reason or "incomplete"
    if invocation.status == ERROR and invocation.error:
        return _first_line(invocation.error)
    result = invocation.result
    if isinstance(result, dict) and isinstance(result.get("summary"), str):
        return str(result["summary"])
    if isinstance(result, str):
        return _first_line(result)
    return invocation.error or ""


def to_json(
    invocations: Sequence[Invocation], *, raw: bool, agents: Mapping[str, AgentRecord] | None = None
) -> str:
    """``{"invocations": [...]}``; ``agents`` (optional) adds each agent's alias."""
    return json.dumps(
        {"invocations": [_json_entry(inv, raw, agents or {}) for inv in invocations]},
        ensure_ascii=False,
        indent=2,
    )


def _json_entry(inv: Invocation, raw: bool, agents: Mapping[str, AgentRecord]) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": inv.id, "agent_id": inv.agent_id}
    alias = _alias(inv.agent_id, agents)
    if alias is not None:
        entry["alias"] = alias
    entry.update(
        tool_name=inv.tool_name,
        args=inv.args,
        status=inv.status,
        started_at=_iso_utc(inv.started_at),
        duration_ms=inv.duration_ms,
        workdir=inv.declared_workdir,
        real_workdir=inv.real_workdir,
        summary=summary(inv),
        session_handle=inv.session_handle,
        handle_creator=inv.handle_creator,
        cross_agent=inv.cross_agent,
        incomplete_reason=inv.incomplete_reason,
        files=[_json_file(change, raw) for change in inv.files],
        by=inv.by,
    )
    if raw:
        entry.update(result=inv.result, error=inv.error)
    return entry


def _json_file(change: FileChange, raw: bool) -> dict[str, Any]:
    found: dict[str, Any] = {
        "operation": change.operation,
        "path": change.path,
        "old_path": change.old_path,
        "added": change.added,
        "removed": change.removed,
    }
    if raw:
        found["diff"] = list(change.diff)
    return found


def to_markdown(
    invocations: Sequence[Invocation], agents: Mapping[str, AgentRecord], *, raw: bool, tz: tzinfo = UTC
) -> str:
    if not invocations:
        return "No invocations.\n"
    return "\n".join(_markdown_entry(inv, agents, raw, tz) for inv in invocations)


def _markdown_entry(inv: Invocation, agents: Mapping[str, AgentRecord], raw: bool, tz: tzinfo) -> str:
    who = inv.agent_id or "unattributed"
    alias = _alias(inv.agent_id, agents)
    if alias is not None:
        who += f" ({alias})"
    if inv.by == BY_PERSON:
        who = f"a person, in {who}'s session"
    heading = [_local_time(inv.started_at, tz), who, inv.tool_name, inv.status]
    if inv.duration_ms is not None:
        heading.append(_duration(inv.duration_ms))
    lines = ["## " + " · ".join(heading)]

    where = f"- id {_code(inv.id)}"
    if inv.declared_workdir is not None:
        where += f" · workdir {_code(inv.declared_workdir)}"
    if inv.real_workdir not in (None, inv.declared_workdir):
        where += f" (real {_code(str(inv.real_workdir))})"
    lines.append(where)

    if inv.tool_name == "exec_command":
        lines += _command_lines(str(inv.args.get("cmd", "")))
    elif inv.tool_name == "write_stdin":
        lines += _stdin_lines(inv)
    lines += _outcome_lines(inv)
    if inv.tool_name == "apply_patch":
        # After the outcome, which reads "Success. Updated the following files:".
        lines += [_file_line(change) for change in inv.files]
    lines += _output_tail(inv.result)

    if raw:
        lines += ["", "arguments:", *_fenced(json.dumps(inv.args, ensure_ascii=False, indent=2), "json")]
        if inv.result is not None:
            if isinstance(inv.result, str):
                lines += ["result:", *_fenced(inv.result, "text")]
            else:
                lines += ["result:", *_fenced(json.dumps(inv.result, ensure_ascii=False, indent=2), "json")]
        if inv.error is not None:
            lines += ["error:", *_fenced(inv.error, "text")]
    return "\n".join(lines) + "\n"


def _outcome_lines(inv: Invocation) -> list[str]:
    outcome = summary(inv)
    if inv.status == ERROR:
        outcome = f"error: {outcome}"
    elif inv.status == INCOMPLETE:
        outcome = f"incomplete: {outcome}"
    exit_code = _exit_code(inv.result)
    if exit_code:
        outcome = f"{outcome} · {exit_code}" if outcome else exit_code
    return [f"- {outcome}"] if outcome else []


def _command_lines(cmd: str) -> list[str]:
    if "\n" in cmd or "`" in cmd:
        return ["- command:", *_fenced(cmd, "sh")]
    return [f"- command: {_code(cmd)}"]


def _stdin_lines(inv: Invocation) -> list[str]:
    session = f"- session {_code(inv.session_handle or str(inv.args.get('session_handle', '?')))}"
    if inv.handle_creator is not None:
        session += f", created by {inv.handle_creator}"
    if inv.cross_agent:
        session += " (another agent)"
    if inv.args.get("kill_process"):
        action = "kill"
    elif inv.args.get("chars"):
        action = "typed " + _code(json.dumps(inv.args["chars"], ensure_ascii=False))
    else:
        action = "poll"
    return [f"{session} · {action}"]


def _file_line(change: FileChange) -> str:
    counts = f"(+{change.added} −{change.removed})"
    if change.old_path is not None and change.old_path != change.path:
        return f"- {change.operation} {_code(change.old_path)} → {_code(change.path)} {counts}"
    return f"- {change.operation} {_code(change.path)} {counts}"


def _exit_code(result: Any) -> str:
    if not isinstance(result, dict) or "exit_code" not in result:
        return ""
    text = f"exit code {result['exit_code']}"
    return f"{text} ({result['signal']})" if result.get("signal") else text


def _output_tail(result: Any) -> list[str]:
    output = result.get("output") if isinstance(result, dict) else None
    if not isinstance(output, str) or not output.strip():
        return []
    rows = output.rstrip("\n").split("\n")
    tail = rows[-OUTPUT_TAIL_LINES:]
    label = "- output:" if len(tail) == len(rows) else f"- output (last {len(tail)} of {len(rows)} lines):"
    cut = [row if len(row) <= LINE_WIDTH else row[: LINE_WIDTH - 1] + "…" for row in tail]
    return [label, *_fenced("\n".join(cut), "text")]


def _fenced(text: str, lang: str) -> list[str]:
    # A fence longer than any backtick run inside, so the content cannot close it.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, text, fence]


def _code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _alias(agent_id: str | None, agents: Mapping[str, AgentRecord]) -> str | None:
    record = agents.get(agent_id) if agent_id is not None else None
    return None if record is None else record.alias


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _iso_utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _local_time(timestamp: float, tz: tzinfo) -> str:
    text = datetime.fromtimestamp(timestamp, tz).isoformat(sep=" ", timespec="seconds")
    return text.replace("+00:00", "Z")


def _duration(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes}m {seconds:02d}s"
