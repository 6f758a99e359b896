"""The result of ``exec_command`` / ``write_stdin`` (docs/tools.md#results), built from a session."""

from __future__ import annotations

from typing import Any

from zodex_worker.session import Session


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f}s"


def summary_line(session: Session) -> str:
    wall = _seconds(session.wall_time_ms())
    ending = session.ending
    if ending is None:
        return f"still running after {wall}; use session_handle {session.handle} to poll"
    if ending.reason == "timeout":
        line = f"timed out after {wall}"
    elif ending.reason == "killed":
        line = f"killed after {wall}"
    elif ending.signal is not None:
        line = f"terminated by {ending.signal} after {wall}"
    else:
        line = f"exited {ending.exit_code} after {wall}"
    if ending.background:
        noun = "process" if ending.background == 1 else "processes"
        line += f"; {ending.background} background {noun} still running"
    return line


def session_result(session: Session, output: str) -> dict[str, Any]:
    result: dict[str, Any] = {
        "summary": summary_line(session),
        "status": "running" if session.running else "exited",
        "output": output,
        "cwd": session.refresh_cwd(),
        "wall_time_ms": session.wall_time_ms(),
    }
    ending = session.ending
    if ending is None:
        result["session_handle"] = session.handle
    else:
        result["exit_code"] = ending.exit_code
        if ending.signal is not None:
            result["signal"] = ending.signal
        result["termination_reason"] = ending.reason
        if ending.left_behind or ending.background:
            # The handle stays the way to poll and kill the jobs the command left behind
            # (docs/sessions.md#background-processes).
            result["background_processes"] = ending.background
            if ending.background:
                result["session_handle"] = session.handle
    spill = session.output.spill_fields()
    if spill is not None:
        result.update(spill)
    return result


def tombstone_result(final: dict[str, Any]) -> dict[str, Any]:
    """A poll of an evicted session: the final fields again, with no new output."""
    return {**final, "output": ""}
