#!/usr/bin/env python3
"""The gateway's own part of a trivial call, in one process: what a client waits for, and
what runs after its answer.

    .venv/bin/python scripts/bench_call_path.py [--calls 3000] [--log]
    PYTHONPATH=/tmp/zodex-base .venv/bin/python scripts/bench_call_path.py   # another tree

A ``ToolDispatcher`` with history on answers ``exec_command`` through a dispatcher that
replies at once with a trivial command's result, each call in a task of its own as the MCP
SDK runs a request. ``answer`` is the time from the call's start to its result handed back
(the client's share: history's begin and completion included); ``after`` the time from
there until the task's done callbacks have run (what runs after the answer). With ``--log``
the call log goes at info level to a file through the redacting formatter, as the Local
runtime writes ``runtime.log``. Prints p50/p90 of each; the first 500 calls are left out.
Interleave runs of two trees for an A/B: the figures are small, a busy machine moves them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mcp_types as types

from zodex_gateway.history import HistoryStore
from zodex_gateway.mcp.local_features import LocalFeatures
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_gateway.redaction import SECRETS, RedactingFormatter
from zodex_protocol.replies import Patched, SessionResult


class AnsweringDispatcher:
    """Replies to every exec_command at once, as a worker does for ``true``."""

    async def exec_command(
        self, args: Mapping[str, Any], *, tag: str | None = None, progress: Any = None, workdir: Any = None
    ) -> Any:
        return SessionResult(
            summary="exited", status="exited", output="", cwd=args["workdir"], wall_time_ms=1, exit_code=0,
            session="s0001",
        )  # fmt: skip

    async def write_stdin(self, args: Mapping[str, Any], *, progress: Any = None) -> SessionResult:
        raise NotImplementedError

    async def apply_patch(self, args: Mapping[str, Any], *, workdir: Any = None) -> Patched:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class Ctx:
    """The parts of the SDK's request context a tool call reads."""

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.request = None


def percentiles(times: list[float]) -> str:
    ordered = sorted(times)
    return f"p50 {ordered[len(ordered) // 2] * 1000:.3f} ms  p90 {ordered[int(len(ordered) * 0.9)] * 1000:.3f} ms"


async def run(calls: int, tmp: Path) -> None:
    with HistoryStore(tmp / "history", max_bytes=512 * 2**20) as store:
        local = LocalFeatures(history=store, stdio_connection="bench:1")
        tools = ToolDispatcher(AnsweringDispatcher(), local=local)  # type: ignore[arg-type]
        params = types.CallToolRequestParams(
            name="exec_command", arguments={"cmd": "true", "workdir": str(tmp)}
        )
        answer, after = [], []
        loop = asyncio.get_running_loop()
        for _ in range(calls):
            done = loop.create_future()
            answered: list[float] = []

            async def request(done: asyncio.Future[float] = done, answered: list[float] = answered) -> None:
                started = time.perf_counter()
                await tools.call_tool(Ctx(), params)  # type: ignore[arg-type]
                answered.extend((started, time.perf_counter()))
                # Added last, so it runs after whatever the call left for after its answer.
                task = asyncio.current_task()
                assert task is not None
                task.add_done_callback(lambda _t: done.set_result(time.perf_counter()))

            task = loop.create_task(request())
            ended = await done
            await task
            answer.append(answered[1] - answered[0])
            after.append(ended - answered[1])
    print(f"answer {percentiles(answer[500:])}")
    print(f"after  {percentiles(after[500:])}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--log", action="store_true", help="the call log at info level to a file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.log:
            handler = logging.FileHandler(Path(tmp) / "runtime.log")
            handler.setFormatter(
                RedactingFormatter("%(asctime)s %(name)s %(levelname)s %(message)s", SECRETS)
            )
            logging.getLogger("zodex").addHandler(handler)
            logging.getLogger("zodex").setLevel(logging.INFO)
        asyncio.run(run(args.calls, Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
