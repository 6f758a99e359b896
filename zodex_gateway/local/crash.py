"""Why a Local runtime died without stopping, as `zodex local status` tells it.

A runtime that stops removes its ``discovery.json``; one found published with its process
gone crashed. A fatal signal leaves the daemon's faulthandler traceback at the end of
``runtime.log`` (the daemon enables it on the log's descriptor): the crash's reason is
the last ``Fatal Python error`` written after that runtime said it was serving. SIGKILL
(the OOM killer, ``kill -9``) leaves nothing, and the reason says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from zodex_gateway.local.discovery import Discovery

FATAL: Final = "Fatal Python error: "
_TAIL_BYTES: Final = 256 * 1024
_MAX_LINES: Final = 12  # of the crashing thread's traceback
# faulthandler's words for the signals it handles.
_SIGNALS: Final = {
    "Bus error": "SIGBUS",
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}


@dataclass(frozen=True)
class Crash:
    reason: str  # one line
    signal: str | None  # "SIGBUS", when the log names it
    log_lines: tuple[str, ...]  # the fatal error and the crashing thread's traceback


def crash_of(discovery: Discovery, log_file: Path) -> Crash:
    """The reason a runtime whose process is gone, still published, died."""
    lines = _tail(log_file)
    since = _last_index(lines, lambda line: f"runtime {discovery.runtime_id} " in line)
    fatal = _last_index(lines, lambda line: line.startswith(FATAL))
    if fatal is None or (since is not None and fatal < since):
        return Crash(
            f"the runtime (pid {discovery.pid}) ended without stopping and {log_file.name} does not say "
            "why (killed by SIGKILL or the out-of-memory killer?)",
            None,
            (),
        )
    error = lines[fatal][len(FATAL) :].strip()
    name = _SIGNALS.get(error)
    reason = f"{lines[fatal].strip()} ({name})" if name else lines[fatal].strip()
    return Crash(reason, name, (lines[fatal], *_crashing_thread(lines[fatal + 1 :])))


def _crashing_thread(lines: list[str]) -> list[str]:
    """The "Current thread" block (faulthandler marks the thread that crashed), else the
    first block after the error."""
    start = _last_index(lines, lambda line: line.startswith("Current thread "))
    if start is None:
        start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    block: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line)
    return block[:_MAX_LINES]


def _tail(path: Path) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def _last_index(lines: list[str], test: Callable[[str], bool]) -> int | None:
    for i in range(len(lines) - 1, -1, -1):
        if test(lines[i]):
            return i
    return None
