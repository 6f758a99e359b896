"""Each tool call leaves one line in the gateway's log (docs/modes.md#logs): who, what tool,
where, which session, how it ended, how long — and never its cmd, chars, patch or output.

Over the in-process twin of the dispatcher (see test_tool_handlers.py for why it must be closed).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from tests.support.in_process import InProcessDispatcher
from zodex_gateway.mcp.call_log import CallNote, call_line, error_summary, quoted
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_protocol.limits import Limits

pytestmark = pytest.mark.timeout(30)

SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"
LINE = re.compile(
    r"^call (?P<tool>\S+) agent=(?P<agent>\S+) workdir=(?P<workdir>\S+) session=(?P<session>\S+) "
    r"outcome=(?P<outcome>ok|running|error)(?: exit_code=(?P<exit>-?\d+))?(?: error=(?P<error>\".*\"))? "
    r"duration_ms=(?P<ms>\d+)$"
)


@pytest.fixture
async def handlers(tmp_path: Path) -> AsyncIterator[ToolDispatcher]:
    dispatcher = InProcessDispatcher(Limits(), tmp_path / "spill", ["/bin/bash", "-c"])
    try:
        yield ToolDispatcher(dispatcher)
    finally:
        await dispatcher.close()


async def call(handlers: ToolDispatcher, name: str, **arguments: Any) -> types.CallToolResult:
    return await handlers.call_tool(None, types.CallToolRequestParams(name=name, arguments=arguments))  # type: ignore[arg-type]


def call_lines(caplog: pytest.LogCaptureFixture) -> list[re.Match[str]]:
    lines = [r.getMessage() for r in caplog.records if r.name == "zodex.calls"]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    return [m for m in matches if m is not None]


async def test_one_line_per_call_with_its_fields(
    handlers: ToolDispatcher, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zodex.calls")
    workdir = str(tmp_path)
    await call(handlers, "exec_command", cmd="exit 3", workdir=workdir)
    running = await call(handlers, "exec_command", cmd="sleep 30", workdir=workdir, yield_time_ms=50)
    handle = running.structured_content["session_handle"]  # type: ignore[index]
    await call(handlers, "write_stdin", session_handle=handle, kill_process=True)
    await call(handlers, "write_stdin", session_handle="w-nope")
    await call(handlers, "exec_command", cmd="true", workdir="relative/dir")

    exited, started, killed, unknown, refused = call_lines(caplog)
    assert (exited["tool"], exited["agent"], exited["workdir"]) == ("exec_command", "unattributed", workdir)
    assert (exited["outcome"], exited["exit"]) == ("ok", "3")
    assert exited["session"] != "-", "the session of a command that already ended is named too"
    assert (started["outcome"], started["session"]) == ("running", handle)
    assert (killed["tool"], killed["session"], killed["workdir"], killed["outcome"]) == (
        "write_stdin",
        handle,
        "-",
        "ok",
    )
    assert unknown["outcome"] == "error" and unknown["error"] == '"Unknown session handle: w-nope"'
    assert refused["outcome"] == "error" and "workdir must be an absolute path" in refused["error"]
    assert all(int(m["ms"]) >= 0 for m in (exited, started, killed, unknown, refused))


async def test_cmd_chars_patch_and_output_never_reach_the_log(
    handlers: ToolDispatcher, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, every level
    workdir = str(tmp_path)
    printed = await call(handlers, "exec_command", cmd=f"echo {SECRET}", workdir=workdir)
    assert SECRET in printed.structured_content["output"]  # type: ignore[index]
    cat = await call(handlers, "exec_command", cmd="cat", workdir=workdir, yield_time_ms=50)
    handle = cat.structured_content["session_handle"]  # type: ignore[index]
    await call(handlers, "write_stdin", session_handle=handle, chars=f"{SECRET}\n", yield_time_ms=200)
    await call(handlers, "write_stdin", session_handle=handle, chars="\u0004")
    good = f"*** Begin Patch\n*** Add File: s.txt\n+{SECRET}\n*** End Patch"
    assert not (await call(handlers, "apply_patch", patch=good, workdir=workdir)).is_error
    # Refusals that quote the patch or the command's arguments.
    bad = f"*** Begin Patch\n*** Add File: t.txt\n{SECRET}\n*** End Patch"
    assert (await call(handlers, "apply_patch", patch=bad, workdir=workdir)).is_error
    assert (await call(handlers, "apply_patch", patch=SECRET, workdir=workdir)).is_error
    assert (await call(handlers, "exec_command", cmd=SECRET, workdir=workdir, yield_time_ms="x")).is_error
    assert (
        await call(handlers, "write_stdin", session_handle=handle, chars=SECRET, yield_time_ms=-1)
    ).is_error

    assert len(call_lines(caplog)) == 9
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert SECRET not in logged
    assert SECRET[:12] not in logged


def test_values_cannot_break_the_line() -> None:
    assert quoted("/home/me/src") == "/home/me/src"
    assert quoted("/tmp/a b\nfake line") == '"/tmp/a b\\nfake line"'
    assert quoted("é") == '"\\u00e9"'
    note = CallNote(started=10.0, agent_id="k3x9", alias="fix the build\n")
    result = types.CallToolResult(
        content=[types.TextContent(text="workdir does not exist: /x\nmore")], is_error=True
    )
    line = call_line("exec_command", {"workdir": "/x"}, result, note, now=10.25)
    assert line == (
        'call exec_command agent=k3x9 alias="fix the build\\n" workdir=/x session=- outcome=error '
        'error="workdir does not exist: /x" duration_ms=250'
    )
    assert "\n" not in line


def test_an_invalid_patch_error_is_cut_before_it_quotes_the_patch() -> None:
    message = "Invalid patch hunk on line 4: unexpected line in '*** Add File: n.txt': 'b'. Every line …"
    assert error_summary("apply_patch", message) == "Invalid patch hunk on line 4"
    failed = "apply_patch failed: 0 of 1 file operations succeeded. No files were changed.\n\nFailed:"
    assert error_summary("apply_patch", failed) == failed.split("\n")[0]
    assert error_summary("exec_command", "x" * 1000) == "x" * 300


class _RequestContext:
    """What a tool call reads of the SDK's request context: no ``_meta``, no HTTP request."""

    meta = None
    request = None


async def test_the_line_is_written_once_the_answer_is_on_its_way(
    handlers: ToolDispatcher, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The SDK answers each request in a task of its own: the line comes when that task is done,
    # its duration still the time to the answer.
    caplog.set_level(logging.INFO, logger="zodex.calls")
    params = types.CallToolRequestParams(
        name="exec_command", arguments={"cmd": "true", "workdir": str(tmp_path)}
    )
    lines_at_answer: list[int] = []

    async def request() -> types.CallToolResult:
        result = await handlers.call_tool(_RequestContext(), params)  # type: ignore[arg-type]
        lines_at_answer.append(len(call_lines(caplog)))
        return result

    task = asyncio.get_running_loop().create_task(request())
    result = await task
    assert not result.is_error
    assert lines_at_answer == [0], "no line before the answer is handed back"
    await asyncio.sleep(0)  # the task's done callbacks run on the loop's next step
    [line] = call_lines(caplog)
    assert line["tool"] == "exec_command" and line["outcome"] == "ok" and line["exit"] == "0"
