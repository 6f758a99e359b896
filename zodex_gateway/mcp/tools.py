"""The MCP tool surface: names, descriptions, input and output schemas, annotations (docs/tools.md#annotations).

The descriptions of the yields and the timeout state their defaults and clamps, which
configuration can change: the list is built from the effective ``Limits``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zodex_protocol.limits import Limits
from zodex_protocol.wait_pattern import MAX_PATTERN_CHARS, OUTCOMES

if TYPE_CHECKING:
    import mcp_types as types

EXEC_COMMAND = "exec_command"
WRITE_STDIN = "write_stdin"
APPLY_PATCH = "apply_patch"
SET_AGENT_ALIAS = "set_agent_alias"

_WORKDIR = {
    "type": "string",
    "description": "Absolute path of an existing directory to run in. Required on every call; "
    "no default and no ~ expansion.",
}


def _wait_for(what: str) -> dict[str, Any]:
    return {
        "type": "string",
        "description": f"Regular expression (RE2 syntax, at most {MAX_PATTERN_CHARS} characters) to wait "
        f"for in {what}, as cleaned of terminal escapes: the call returns as soon as it matches, the "
        "command ends, or the yield passes; the result's wait says which (matched, exited, yield) and "
        "matched_text shows the match. ^ and $ match at line starts and ends, and $ also at the end of "
        "the output so far, so '\\$ $' or 'password: $' waits for a prompt; e.g. 'Listening on', "
        "'BUILD (SUCCESSFUL|FAILED)'.",
    }


def exec_input(limits: Limits) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "cmd": {"type": "string", "description": "Shell command line to run (a fresh shell each call)."},
            "workdir": _WORKDIR,
            "yield_time_ms": {
                "type": "integer",
                "minimum": 0,
                "description": "How long to wait before returning a session handle if the command is "
                f"still running (ms). Default {limits.exec_yield_ms}, clamped to "
                f"{limits.yield_min_ms}..{limits.yield_max_ms}. Returns at once when it ends.",
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 0,
                "description": "Wall-clock limit for the whole command (ms), enforced even if nobody "
                f"polls. Default {limits.timeout_ms}, clamped to {limits.timeout_min_ms}..{limits.timeout_max_ms}.",
            },
            "wait_for": _wait_for("the command's output"),
        },
        "required": ["cmd", "workdir"],
    }


def write_input(limits: Limits) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "session_handle": {"type": "string", "description": "Handle from a running exec_command result."},
            "chars": {
                "type": "string",
                "description": "Text to type, exactly as given (no newline added). \\r is Enter, "
                "\\u0003 Ctrl-C, \\u0004 Ctrl-D, \\u001b Escape, \\u001b[A / [B / [C / [D the arrows "
                "up / down / right / left, \\u001b[5~ / [6~ Page Up / Down, \\t Tab; e.g. "
                "'\\u001b:wq\\r' saves and quits vi. Omit or leave empty to just poll for new output.",
            },
            "yield_time_ms": {
                "type": "integer",
                "minimum": 0,
                "description": f"How long to wait for more output or exit (ms). Default {limits.write_yield_ms}, "
                f"clamped to {limits.yield_min_ms}..{limits.yield_max_ms}. Returns early once new output "
                f"has been quiet for {limits.poll_settle_ms} ms.",
            },
            "kill_process": {
                "type": "boolean",
                "description": "Terminate the session's whole process group (chars is ignored). Returns once "
                "the processes are gone.",
            },
            "wait_for": _wait_for(
                "output not returned yet (after typing: the output that follows what chars typed), "
                "instead of returning once output goes quiet"
            ),
        },
        "required": ["session_handle"],
    }


PATCH_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "patch": {
            "type": "string",
            "description": "A Codex-style patch: '*** Begin Patch', then '*** Add File: <path>' / "
            "'*** Delete File: <path>' / '*** Update File: <path>' (optionally '*** Move to: <path>') "
            "sections with '@@' chunks of ' ', '-', '+' lines, then '*** End Patch'.",
        },
        "workdir": {
            **_WORKDIR,
            "description": "Absolute path of an existing directory; relative paths in the patch "
            "resolve against it (absolute paths are allowed too).",
        },
    },
    "required": ["patch", "workdir"],
}

ALIAS_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "alias": {
            "type": "string",
            "description": "A 2-7 word label for this conversation, at most 80 characters, shown to the "
            "person watching Zodex; an empty string clears it.",
        }
    },
    "required": ["alias"],
}

ALIAS_RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "agent_id": {"type": "string", "description": "This conversation's four-character agent id."},
        "alias": {"type": "string", "description": "The label now shown (empty when cleared)."},
        "zodex_context": {"type": "object", "description": "Context for you, on first use (Local)."},
    },
    "required": ["agent_id", "alias"],
}

SESSION_RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "description": "One line: what happened and for how long."},
        "status": {"type": "string", "enum": ["running", "exited"]},
        "output": {
            "type": "string",
            "description": "Cleaned output produced since the previous result of this session.",
        },
        "cwd": {"type": "string", "description": "The command's working directory (physical path)."},
        "wall_time_ms": {"type": "integer", "description": "Milliseconds since the session started."},
        "session_handle": {
            "type": "string",
            "description": "Present while running, or while background processes the command left "
            "behind still run: poll/type/kill with it.",
        },
        "exit_code": {"type": "integer", "description": "Exit status; -1 when ended by a signal."},
        "signal": {"type": "string", "description": "Signal that ended the command, e.g. SIGKILL."},
        "termination_reason": {"type": "string", "enum": ["exit", "timeout", "killed"]},
        "wait": {
            "type": "string",
            "enum": list(OUTCOMES),
            "description": "With wait_for: what ended the wait (the pattern matched, the command exited, "
            "or the yield passed).",
        },
        "matched_text": {
            "type": "string",
            "description": "With wait: matched, the text that matched (at most 200 characters).",
        },
        "output_file": {"type": "string", "description": "File holding the whole output once it grew large."},
        "output_chars": {"type": "integer", "description": "Characters in the whole output so far."},
        "output_lines": {"type": "integer", "description": "Lines in the whole output so far."},
        "output_file_truncated": {
            "type": "boolean",
            "description": "True once the file stopped growing: its size cap, or a write error.",
        },
        "output_file_error": {
            "type": "string",
            "description": "Why the output file is cut short or missing, e.g. No space left on device.",
        },
        "background_processes": {
            "type": "integer",
            "description": "Processes the exited command left behind that still run (kill_process ends them).",
        },
        "screen": {
            "type": "object",
            "description": "The terminal's screen while a full-screen program (vi, less, top, a curses "
            "dialog) shows one; output then holds one line saying so. rows: the screen's rows, trailing "
            "spaces and empty rows dropped; cursor: [row, column] from 0; size: [rows, columns].",
            "properties": {
                "rows": {"type": "array", "items": {"type": "string"}},
                "cursor": {"type": "array", "items": {"type": "integer"}},
                "title": {"type": "string"},
                "alternate": {"type": "boolean"},
                "size": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["rows", "cursor", "title", "alternate", "size"],
        },
        "evicted_session": {
            "type": "object",
            "description": "The exited session this call evicted to make room; any background processes it left "
            "behind were ended.",
            "properties": {"session_handle": {"type": "string"}, "cmd": {"type": "string"}},
            "required": ["session_handle", "cmd"],
        },
        "human_input": {
            "type": "array",
            "description": "What the person watching typed into this session since your last result; "
            "text is null when the terminal hid it (a password prompt).",
            "items": {
                "type": "object",
                "properties": {
                    "at": {"type": "string"},
                    "text": {"type": ["string", "null"]},
                    "hidden": {"type": "boolean"},
                },
                "required": ["at", "text", "hidden"],
            },
        },
        "taken_over": {
            "type": "boolean",
            "description": "True while the person watching has taken this session over (your characters "
            "are refused; poll to watch); false once, when they give it back.",
        },
        "zodex_context": {
            "type": "object",
            "description": "Instructions and skills for you, sent once (Local mode).",
        },
    },
    "required": ["summary", "status", "output", "cwd", "wall_time_ms"],
}

EXEC_DESCRIPTION = (
    "Run a shell command in a fresh PTY (200x50) in the given absolute workdir. If it finishes "
    "within yield_time_ms the result comes back at once with its exit code; otherwise you get a "
    "session_handle to poll, type into, or kill with write_stdin. To start a server or anything "
    "that prints a line when it is ready, give wait_for (a regular expression such as "
    "'Listening on'): the call returns the moment that text appears instead of waiting out the "
    "yield. Output is cleaned of terminal escapes; long output is cut to its first and last "
    "lines and saved whole to output_file. A full-screen program (vi, less, top) comes back as "
    "its rendered screen in the result's screen field."
)
WRITE_DESCRIPTION = (
    "Poll, type into, or kill a session started by exec_command. Each result carries only the "
    "output produced since the previous result. Send \\u0003 to interrupt (Ctrl-C). Keys for a "
    "full-screen program go in chars as escapes (\\u001b[A is Up, \\r Enter); the result then "
    "shows its screen after the keys took effect. To wait for "
    "something specific (a prompt such as '\\$ $', 'BUILD (SUCCESSFUL|FAILED)'), give wait_for "
    "instead of polling in a loop: the call returns as soon as it matches."
)
ALIAS_DESCRIPTION = (
    "Give this conversation a short label (2-7 words) so the person watching Zodex can tell "
    "agents apart. Call it once near the start, and again if the task changes."
)
PATCH_DESCRIPTION = (
    "Apply a Codex-style multi-file patch (add, delete, update, move files). Each file is "
    "written atomically; context must match the file (whitespace-tolerant, never guessed). "
    "Reports which files changed and, for a mismatch, the nearest region of the file."
)


def catalog(limits: Limits, *, read_only_hint: bool = True, with_alias: bool = True) -> list[dict[str, Any]]:
    """The tools as ``tools/list`` lists them (wire names, plain JSON): Local lists four,
    Sprite three (no set_agent_alias). ``limits``: the effective ones."""
    # readOnlyHint keeps some clients from asking the user to confirm each call (docs/tools.md#annotations).
    annotations = {"readOnlyHint": read_only_hint, "destructiveHint": False, "openWorldHint": False}
    listed: list[dict[str, Any]] = [
        {
            "name": EXEC_COMMAND,
            "description": EXEC_DESCRIPTION,
            "inputSchema": exec_input(limits),
            "outputSchema": SESSION_RESULT,
            "annotations": annotations,
        },
        {
            "name": WRITE_STDIN,
            "description": WRITE_DESCRIPTION,
            "inputSchema": write_input(limits),
            "outputSchema": SESSION_RESULT,
            "annotations": annotations,
        },
        {
            "name": APPLY_PATCH,
            "description": PATCH_DESCRIPTION,
            "inputSchema": PATCH_INPUT,
            "annotations": annotations,
        },
    ]
    if with_alias:
        listed.append(
            {
                "name": SET_AGENT_ALIAS,
                "description": ALIAS_DESCRIPTION,
                "inputSchema": ALIAS_INPUT,
                "outputSchema": ALIAS_RESULT,
                "annotations": annotations,
            }
        )
    return listed


def tool_list(limits: Limits, *, read_only_hint: bool = True, with_alias: bool = True) -> list[types.Tool]:
    """:func:`catalog` as the SDK's types, for the servers."""
    import mcp_types as types  # here, not at the top: the stdio bridge imports this module without the SDK

    listed = catalog(limits, read_only_hint=read_only_hint, with_alias=with_alias)
    return [types.Tool.model_validate(tool) for tool in listed]
