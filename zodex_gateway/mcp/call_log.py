"""One line in the gateway's log per completed tool call (docs/modes.md#logs).

An operator reading ``runtime.log`` sees who called what, where, how it ended and how long
it took — never what was run or typed: ``cmd``, ``chars``, ``patch`` and every output stay
in history, which viewers read redacted. Only the tool name, the agent, the workdir, the
session handle, the outcome and the duration are written; an error keeps its first line,
cut short where an ``Invalid patch…`` message starts quoting the patch.

Each line is written once the call's answer is on its way (:mod:`.after_answer`). The lines
go to the ``zodex.calls`` logger at info level: the Local runtime logs info to
``runtime.log`` (through the redacting formatter), while a foreground gateway logs only
warnings to its stderr, so these lines do not reach a stdio client's terminal.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from zodex_gateway.mcp import tools
from zodex_gateway.mcp.after_answer import after_answer

log = logging.getLogger("zodex.calls")

UNATTRIBUTED = "unattributed"
# Longest error line kept: the first line of a refusal says what went wrong.
MAX_ERROR_CHARS = 300
_BARE = re.compile(r"[A-Za-z0-9_./:@+=,-]+")


@dataclass
class CallNote:
    """What a call's handler learns on the way, for its log line: who called, and the
    session the call created (also when it already ended, which its result does not say)."""

    started: float = field(default_factory=time.monotonic)
    agent_id: str | None = None
    alias: str | None = None
    created_handle: str | None = None


def quoted(value: str) -> str:
    """A field value as one safe token: bare when plain, else JSON-quoted (ASCII, so a
    model's newline or escape sequence cannot start a fake log line)."""
    return value if _BARE.fullmatch(value) else json.dumps(value, ensure_ascii=True)


def error_summary(tool: str, text: str) -> str:
    line = text.split("\n", 1)[0].strip()
    if tool == tools.APPLY_PATCH and line.startswith("Invalid patch"):
        line = line.split(": ", 1)[0]  # what follows quotes the patch's own lines
    return line[:MAX_ERROR_CHARS]


def call_line(
    tool: str, args: dict[str, Any], result: types.CallToolResult, note: CallNote, now: float | None = None
) -> str:
    """``call <tool> agent=… workdir=… session=… outcome=… [exit_code=N] [error="…"] duration_ms=N``."""
    elapsed_ms = round(((time.monotonic() if now is None else now) - note.started) * 1000)
    agent = note.agent_id or UNATTRIBUTED
    fields = [f"call {quoted(tool)}", f"agent={quoted(agent)}"]
    if note.alias:
        fields.append(f"alias={quoted(note.alias)}")
    workdir = args.get("workdir")
    fields.append(f"workdir={quoted(workdir) if isinstance(workdir, str) else '-'}")
    structured = result.structured_content if isinstance(result.structured_content, dict) else {}
    handle = note.created_handle or structured.get("session_handle") or args.get("session_handle")
    fields.append(f"session={quoted(handle) if isinstance(handle, str) and handle else '-'}")
    if result.is_error:
        block = result.content[0] if result.content else None
        text = block.text if isinstance(block, types.TextContent) else ""
        fields += ["outcome=error", f"error={json.dumps(error_summary(tool, text), ensure_ascii=True)}"]
    elif structured.get("status") == "running":
        fields.append("outcome=running")
    else:
        fields.append("outcome=ok")
        exit_code = structured.get("exit_code")
        if isinstance(exit_code, int) and not isinstance(exit_code, bool):
            fields.append(f"exit_code={exit_code}")
    fields.append(f"duration_ms={elapsed_ms}")
    return " ".join(fields)


class CallLog:
    """A gateway's call lines. Remembers the labels ``set_agent_alias`` gave, since the
    agent a handler resolved may carry the label it had when first seen."""

    def __init__(self) -> None:
        self._aliases: dict[str, str | None] = {}

    def completed(
        self,
        tool: str,
        args: dict[str, Any],
        result: types.CallToolResult,
        note: CallNote,
        ended: float | None = None,
        *,
        in_request_task: bool = False,
    ) -> None:
        """``ended``: when the call was answered (default now); the line is written once the
        answer is on its way when the call runs in a request task of its own (after_answer)."""
        labelled = (
            result.structured_content if tool == tools.SET_AGENT_ALIAS and not result.is_error else None
        )
        if isinstance(labelled, dict) and isinstance(labelled.get("agent_id"), str):
            self._aliases[labelled["agent_id"]] = labelled.get("alias") or None
        if note.agent_id is not None and note.agent_id in self._aliases:
            note.alias = self._aliases[note.agent_id]
        if log.isEnabledFor(logging.INFO):  # else (a foreground gateway) nothing is left for later
            now = time.monotonic() if ended is None else ended
            after_answer(
                lambda: log.info("%s", call_line(tool, args, result, note, now)),
                in_request_task=in_request_task,
            )
