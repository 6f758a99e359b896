"""Records and agents as Rich text: one dense line each, more lines when expanded.

Pure functions of the JSON the observer serves (no terminal, no network).
"""

from __future__ import annotations

import time
from typing import Any, Final

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from zodex_gateway.history import NO_AGENT
from zodex_gateway.viewers.tui.model import Agent, Record

EXPANDED_OUTPUT_LINES: Final = 40
EXPANDED_DIFF_ROWS: Final = 200
MIN_COMMAND_CELLS: Final = 12
UNATTRIBUTED: Final = "Unattributed"  # the calls with no agent, wherever an agent is named
_OPERATION_WORDS: Final = {"created": "Added", "edited": "Edited", "deleted": "Deleted", "renamed": "Renamed"}
_INDENT: Final = "    "
_STATE_STYLE: Final = {
    "live": ("●", "green"),
    "polling": ("●", "yellow"),
    "connecting": ("○", "yellow"),
    "reconnecting": ("○", "red"),
    "unauthorized": ("✕", "red"),
    "failed": ("✕", "red"),
}


def clock(ms: Any, *, today: str | None = None) -> str:
    """``HH:MM:SS`` local time; a date is prefixed when it is not today."""
    if not isinstance(ms, int):
        return "--:--:--"
    local = time.localtime(ms / 1000)
    day = time.strftime("%Y-%m-%d", local)
    if day == (today or time.strftime("%Y-%m-%d")):
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%m-%d %H:%M", local)


def duration(ms: Any) -> str:
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return ""
    if ms < 1000:
        return f"{int(ms)}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def title_text(
    *,
    runtime_id: str,
    show_all: bool,
    agent_id: str | None,
    alias: str,
    shown: int,
    query: str,
    older: bool,
) -> Text:
    """The top line: which runtime, whose records, how many."""
    title = Text(no_wrap=True, overflow="ellipsis")
    title.append("zodex local watch", style="bold")
    title.append(f"  runtime {runtime_id}", style="dim")
    if show_all:
        title.append("  ·  all agents")
    elif agent_id == NO_AGENT:
        title.append(f"  ·  {UNATTRIBUTED}")
    elif agent_id is not None:
        title.append(f"  ·  agent {agent_id}")
        if alias:
            title.append(f" {printable(alias)}", style="bold")
    title.append(f"  ·  {shown} record{'s' if shown != 1 else ''}", style="dim")
    if query:
        title.append(f"  ·  search “{printable(query)}”", style="yellow")
    if older:
        title.append("  ·  older below", style="dim")
    return title


def connection_text(state: str, detail: str) -> Text:
    glyph, style = _STATE_STYLE.get(state, ("○", "yellow"))
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{glyph} {state}", style=style)
    if detail:
        text.append(f" · {detail}", style="dim")
    return text


def agent_text(agent: Agent, *, running: int | None = None) -> Text:
    """Two lines: id and alias; newest workdir and active processes. The entry of the
    calls with no agent reads "Unattributed"."""
    text = Text(no_wrap=True, overflow="ellipsis")
    workdirs = agent.get("workdirs") or []
    if agent.get("unattributed"):
        text.append(UNATTRIBUTED, style="bold")
        text.append("\n  ")
        text.append("calls from clients with no session", style="dim")
    else:
        text.append(str(agent.get("agent_id") or "?"), style="bold")
        alias = agent.get("alias")
        if alias:
            text.append(f" {printable(str(alias))}")
        text.append("\n  ")
        text.append(str(workdirs[0]) if workdirs else "(no workdir yet)", style="dim")
    active = agent.get("active_processes")
    count = active if isinstance(active, int) else (running or 0)
    if count:
        text.append(f"  ● {count} running", style="yellow")
    return text


def all_agents_text(count: int) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("All agents", style="bold")
    text.append(f"\n  {count} agent{'s' if count != 1 else ''}, interleaved", style="dim")
    return text


def record_text(
    record: Record,
    *,
    expanded: bool = False,
    show_agent: bool = False,
    cursor: bool = False,
    now_ms: int | None = None,
    width: int | None = None,
) -> Text:
    """The record's line (and, expanded, its body); ``cursor`` marks the chosen one with
    ``▸`` so it shows without colour too; with ``now_ms`` a running command shows how long
    it has run so far; with ``width`` (cells) a long command is cut to fit its status."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("▸ " if cursor else "  ", style="bold")
    text.append(clock(record.get("started_at_ms")), style="dim")
    text.append("  ")
    if show_agent:
        text.append(str(record.get("agent_id") or " -- "), style="cyan")
        text.append("  ")
    kind = record.get("kind")
    if kind == "command":
        cut = _command_line(text, record, now_ms, width)
        if expanded:
            _command_body(text, record, show_command=cut)
    elif kind == "file_changes":
        _files_line(text, record)
        if expanded:
            _files_body(text, record)
    elif kind == "stdin":
        text.append("⇢ ", style="blue")
        text.append("stdin ", style="bold")
        text.append(printable(repr(str(record.get("chars") or ""))))
        text.append(f"  → {record.get('session_handle') or '?'}", style="dim")
    elif kind == "kill":
        text.append("✕ ", style="red")
        text.append("kill ", style="bold")
        text.append(str(record.get("session_handle") or "?"))
        _meta(text, record.get("summary"))
    else:
        failed = record.get("status") == "error" or bool(record.get("error"))
        text.append("✗ " if failed else "• ", style="red" if failed else "dim")
        text.append(str(record.get("tool_name") or kind or "call"), style="bold")
        _meta(text, record.get("error") or record.get("summary"), style="red" if failed else "dim")
        if expanded:
            _lines(text, str(record.get("summary") or ""), style="dim")
    return text


def _command_line(text: Text, record: Record, now_ms: int | None, width: int | None) -> bool:
    """The command's row; True if the command had to be cut (or spans lines)."""
    running = record.get("status") == "running"
    code = record.get("exit_code")
    reason = record.get("termination_reason")
    if running:
        text.append("● ", style="yellow")
    elif code == 0:
        text.append("✓ ", style="green")
    else:
        text.append("✗ ", style="red")
    meta = Text("  ")
    parts: list[tuple[str, str]] = []
    if running:
        parts.append(("running", "yellow"))
    elif reason not in (None, "exit"):
        parts.append((str(reason), "red"))  # killed, timed out…: more telling than its code
    elif code is not None:
        parts.append((f"exit {code}", "green" if code == 0 else "red"))
    else:
        parts.append(("exited", "red"))
    polls = record.get("poll_count")
    if isinstance(polls, int) and polls:
        parts.append((f"{polls} poll{'s' if polls != 1 else ''}", "dim"))
    took_ms = record.get("duration_ms")
    started = record.get("started_at_ms")
    if running and now_ms is not None and isinstance(started, int):
        # duration_ms of a running command is the last call's wait; the elapsed time is
        # what a person watching wants.
        took_ms = max(now_ms - started, took_ms if isinstance(took_ms, int) else 0)
    took = duration(took_ms)
    if took:
        parts.append((took, "dim"))
    for index, (part, style) in enumerate(parts):
        if index:
            meta.append(" · ", style="dim")
        meta.append(part, style=style)
    text.append("$ ", style="dim")
    command = one_line(str(record.get("command") or ""))
    cut = "\n" in str(record.get("command") or "").strip()
    if width is not None:
        # A long command gives way so that how it ended stays on screen.
        room = max(MIN_COMMAND_CELLS, width - text.cell_len - meta.cell_len)
        if cell_len(command) > room:
            command = set_cell_size(command, room - 1) + "…"
            cut = True
    text.append(command, style="bold")
    text.append_text(meta)
    return cut


def _command_body(text: Text, record: Record, *, show_command: bool) -> None:
    if show_command:
        _lines(text, "$ " + str(record.get("command") or "").strip(), style="bold")
    details = [f"cwd {record.get('cwd') or record.get('workdir') or '?'}"]
    if record.get("exit_code") is not None and record.get("termination_reason") not in (None, "exit"):
        details.append(f"exit {record['exit_code']}")
    if record.get("session_handle"):
        details.append(f"session {record['session_handle']}")
    _lines(text, " · ".join(details), style="dim")
    screen = record.get("screen")
    if isinstance(screen, dict) and isinstance(screen.get("rows"), list):
        # A full-screen program: its screen, as a terminal shows it (docs/output.md#screens).
        title = f" · {screen['title']}" if screen.get("title") else ""
        _lines(text, f"screen{title}", style="dim italic")
        _lines(text, "\n".join(str(row) for row in screen["rows"]) or " ")
        return
    tail = str(record.get("output_tail") or "").rstrip("\n")
    if not tail:
        _lines(text, "(no output)", style="dim italic")
        return
    lines = tail.split("\n")
    if record.get("output_truncated") or len(lines) > EXPANDED_OUTPUT_LINES:
        _lines(text, "… earlier output not shown", style="dim italic")
    _lines(text, "\n".join(lines[-EXPANDED_OUTPUT_LINES:]))


def file_label(entry: dict[str, Any], workdir: Any = None) -> Text:
    operation = str(entry.get("operation") or "")
    text = Text()
    text.append(_OPERATION_WORDS.get(operation, operation.capitalize() or "Changed"), style="bold")
    text.append(" ")
    if operation == "renamed" and entry.get("old_path"):
        text.append(f"{short_path(entry['old_path'], workdir)} → ")
    text.append(short_path(entry.get("path") or "?", workdir))
    text.append(f" +{entry.get('added', 0)}", style="green")
    text.append(f" −{entry.get('removed', 0)}", style="red")
    return text


def _files_line(text: Text, record: Record) -> None:
    files = [entry for entry in record.get("files") or [] if isinstance(entry, dict)]
    text.append("± ", style="magenta")
    if not files:
        text.append(str(record.get("summary") or "file changes"))
        return
    for index, entry in enumerate(files):
        if index:
            text.append(", ", style="dim")
        text.append_text(file_label(entry, record.get("workdir")))


def _files_body(text: Text, record: Record) -> None:
    for entry in record.get("files") or []:
        if not isinstance(entry, dict):
            continue
        text.append("\n" + _INDENT)
        text.append_text(file_label(entry, record.get("workdir")))
        rows = entry.get("diff")
        if not isinstance(rows, list):
            continue
        for row in rows[:EXPANDED_DIFF_ROWS]:
            line, style = diff_row(row)
            text.append("\n" + _INDENT + "  ")
            text.append(line, style=style)
        if len(rows) > EXPANDED_DIFF_ROWS:
            _lines(text, "  … more diff rows not shown", style="dim italic")


def diff_row(row: Any) -> tuple[str, str]:
    """One unified diff line (docs/observer.md: ``--- a``, ``+++ b``, ``@@ …``, then rows
    starting with ``' '``, ``-`` or ``+``) as text and style."""
    line = printable(str(row))
    if line.startswith(("--- ", "+++ ")):
        return line, "bold dim"
    if line.startswith("@@"):
        return line, "cyan"
    if line.startswith("+"):
        return line, "green"
    if line.startswith("-"):
        return line, "red"
    if line.startswith("…"):
        return line, "dim italic"
    return line, ""


def short_path(path: Any, workdir: Any) -> str:
    """``path`` relative to the call's workdir when it lies inside it: dense, and what the
    patch itself said."""
    text = printable(str(path))
    if isinstance(workdir, str) and workdir and text.startswith(workdir.rstrip("/") + "/"):
        return text[len(workdir.rstrip("/")) + 1 :]
    return text


def _meta(text: Text, value: Any, *, style: str = "dim") -> None:
    if value:
        text.append("  ")
        text.append(printable(str(value).split("\n", 1)[0]), style=style)


def _lines(text: Text, block: str, *, style: str = "") -> None:
    for line in block.split("\n"):
        text.append("\n" + _INDENT)
        text.append(printable(line), style=style)


def one_line(value: str) -> str:
    """A multi-line command on one row: its line breaks shown as ``↵``."""
    return printable(value.strip().replace("\r\n", "\n").replace("\n", " ↵ "))


def printable(value: str) -> str:
    # Control characters would move the terminal's cursor in the middle of a row.
    if value.isprintable():
        return value
    return "".join(
        "    " if ch == "\t" else ch if ch.isprintable() or ch == "\n" else "\ufffd" for ch in value
    )
