"""Work left for after a call's answer: run when the request's task ends, at once outside
one, and at exit when the task never ended."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from zodex_gateway.mcp import after_answer as module
from zodex_gateway.mcp.after_answer import after_answer


async def test_work_runs_once_the_request_task_has_ended() -> None:
    ran: list[str] = []
    answered = asyncio.Event()

    async def request() -> str:
        after_answer(lambda: ran.append("completed"), in_request_task=True)
        ran.append("answered")
        answered.set()
        return "answer"

    task = asyncio.get_running_loop().create_task(request())
    await answered.wait()
    assert ran == ["answered"]  # not while the request is still answering
    assert await task == "answer"
    await asyncio.sleep(0)  # done callbacks run on the loop's next step
    assert ran == ["answered", "completed"]
    assert not module._pending


async def test_work_runs_at_once_outside_a_request_task() -> None:
    ran: list[str] = []
    after_answer(lambda: ran.append("completed"), in_request_task=False)
    assert ran == ["completed"]


async def test_a_failing_piece_does_not_stop_the_next() -> None:
    ran: list[str] = []

    def fails() -> None:
        raise RuntimeError("boom")

    async def request() -> None:
        after_answer(fails, in_request_task=True)
        after_answer(lambda: ran.append("second"), in_request_task=True)

    await asyncio.get_running_loop().create_task(request())
    await asyncio.sleep(0)
    assert ran == ["second"]


def test_work_left_when_the_process_exits_still_runs_and_reaches_the_log() -> None:
    # A task that never ends (the loop stopped under it): its work runs at exit, before
    # logging shuts down, so the line is written.
    script = """
import asyncio, logging, sys
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
from zodex_gateway.mcp.after_answer import after_answer
async def request():
    after_answer(lambda: logging.getLogger("zodex.calls").info("call line"), in_request_task=True)
    await asyncio.Event().wait()
loop = asyncio.new_event_loop()
loop.create_task(request())
loop.run_until_complete(asyncio.sleep(0.01))
print("loop stopped")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # (asyncio then says the never-ended task was destroyed pending.)
    assert done.stdout.splitlines()[:2] == ["loop stopped", "call line"]
