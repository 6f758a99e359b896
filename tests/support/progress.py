"""Driving a waiting tool call as a user's client does: a progress callback that records each
note, and a call task cancelled once it is waiting (docs/tools.md#progress-and-cancellation)."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import anyio

from tests.support.gateway import Mcp

NOTE = re.compile(r"session (\S+) running \d+ s, [\d,]+ characters of new output")


def release(fifo: Path, text: str = "released\n") -> threading.Thread:
    """Write ``text`` into ``fifo`` once its reader opens it (on a thread: opening blocks)."""

    def write() -> None:
        with fifo.open("w") as pipe:
            pipe.write(text)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


class Notes:
    """The progress a call heard, and an event for the first one."""

    def __init__(self) -> None:
        self.heard: list[tuple[float, float | None, str | None]] = []
        self.first = anyio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.heard.append((progress, total, message))
        self.first.set()

    def handle(self) -> str:
        match = NOTE.fullmatch(self.heard[0][2] or "")
        assert match, self.heard
        return match.group(1)


async def cancelled_while_waiting(mcp: Mcp, tool: str, args: dict[str, Any]) -> str:
    """Call ``tool`` with a long yield, cancel it once it has reported progress (it is
    waiting then), and return the session it waited on."""
    notes = Notes()
    finished: list[Any] = []
    async with anyio.create_task_group() as group:

        async def call() -> None:
            finished.append(
                await mcp.client.call_tool(tool, {**args, "yield_time_ms": 30000}, progress_callback=notes)
            )

        group.start_soon(call)
        await notes.first.wait()
        group.cancel_scope.cancel()
    assert not finished, "the call returned instead of being cancelled"
    return notes.handle()


async def a_cancel_leaves_output_and_command(mcp: Mcp, workdir: Path, fifo: Path) -> None:
    """A call that waits on ``echo before; cat <fifo>`` in ``workdir``, cancelled once it
    reports progress: the next poll, answered at once, has ``before`` (a wait that had gone
    on would hold the session or have taken it), and the command goes on to its end."""
    handle = await cancelled_while_waiting(
        mcp, "exec_command", {"cmd": f"echo before; cat {fifo}", "workdir": str(workdir)}
    )
    polled = await mcp.write(handle, yield_time_ms=100)
    assert polled["output"] == "before\n" and polled["status"] == "running", polled
    release(fifo)
    output, final = await mcp.drain(handle)
    assert output == "released\n" and final["exit_code"] == 0
