"""Work a tool call leaves until its answer is on its way: telling the viewers it completed,
and its line in the log (docs/observer.md, docs/modes.md#logs).

The SDK runs each request in a task of its own that hands the answer to the transport and
then ends. Work left for after the answer runs when that task is done, so a client waiting
for the answer does not wait for it too; it still runs on the loop before the gateway reads
the client's next request. Without a request task of its own (a call made directly, not
through the SDK) the work runs at once. Work still left when the process exits runs then,
so a stopping gateway loses no log line.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from collections.abc import Callable

log = logging.getLogger("zodex.gateway")

Work = Callable[[], None]

# Work left for after an answer and not yet run, in the order it was left.
_pending: dict[int, Work] = {}
_next_key = 0


def after_answer(work: Work, *, in_request_task: bool) -> None:
    """Run ``work`` once the current request's task has ended (its answer sent), or at once
    when the caller is not in a request task of its own."""
    global _next_key
    task = asyncio.current_task() if in_request_task else None
    if task is None or task.done():
        work()
        return
    key = _next_key
    _next_key += 1
    _pending[key] = work
    task.add_done_callback(lambda _task: _run(key))


def run_pending() -> None:
    """Run every piece of work still left, oldest first (at exit, or when stopping)."""
    for key in sorted(_pending):
        _run(key)


def _run(key: int) -> None:
    work = _pending.pop(key, None)
    if work is None:
        return
    try:
        work()
    except Exception:  # one failed piece must not stop the others or the loop
        log.exception("work left for after a call's answer failed")


# Registered after logging's own exit handler, so it runs first: the lines still reach the log.
atexit.register(run_pending)
