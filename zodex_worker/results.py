"""The result of ``exec_command`` / ``write_stdin`` (docs/tools.md#results), built from a session."""

from __future__ import annotations

from zodex_protocol.replies import SessionResult
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


def screen_notice(output: str) -> str:
    """The one line ``output`` holds when the result carries the screen instead."""
    return f"[zodex] a full-screen program: its screen is in the `screen` field ({len(output):,} characters of escape-stripped output not shown)"


def session_result(session: Session, output: str) -> SessionResult:
    ending = session.ending
    running = ending is None
    # docs/output.md#screens: the alternate screen, or a redrawn one, while the program runs;
    # a command that ended is answered with its text, as it always was.
    screen = session.screen.take() if running else None
    if screen is not None:
        output = screen_notice(output)
    # The handle stays the way to poll and kill the jobs an exited command left behind
    # (docs/sessions.md#background-processes).
    keeps_handle = ending is None or ending.background > 0
    return SessionResult(
        summary=summary_line(session),
        status="running" if running else "exited",
        output=output,
        cwd=session.refresh_cwd(),
        wall_time_ms=session.wall_time_ms(),
        exit_code=None if ending is None else ending.exit_code,
        signal=None if ending is None else ending.signal,
        termination_reason=None if ending is None else ending.reason,
        background_processes=(
            ending.background if ending is not None and (ending.left_behind or ending.background) else None
        ),
        session_handle=session.handle if keeps_handle else None,
        spilled=session.output.spilled(),
        screen=screen,
    )
