"""A call that waits, through every client-facing transport of one machine, at both eras
(docs/tools.md#progress-and-cancellation): with a progress token the client hears
``notifications/progress`` while the command runs; a cancel ends the wait at once, takes
none of the output, and the command and its handle go on. The MCP SDK's own client, driven
as a user's client drives it: a progress callback, and a cancelled call task."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from tests.support.gateway import gateway_env
from tests.support.progress import NOTE, Notes, cancelled_while_waiting, release
from tests.support.raw_stdio import RawStdioGateway
from tests.support.slowdown import scaled
from tests.support.transports import REVISIONS, TRANSPORTS

pytestmark = pytest.mark.timeout(240)

# Notes every second (the default is 5 s): the tests wait for a note or two.
EVERY_MS = 1000


@pytest.mark.parametrize("mode", list(REVISIONS))
@pytest.mark.parametrize("transport", list(TRANSPORTS))
async def test_a_waiting_call_reports_progress(tmp_path: Path, transport: str, mode: str) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    async with TRANSPORTS[transport](tmp_path, mode, progress_interval_ms=EVERY_MS) as mcp:
        notes = Notes()
        async with anyio.create_task_group() as group:

            async def release_after_two() -> None:
                while len(notes.heard) < 2:
                    await notes.first.wait()
                    notes.first = anyio.Event()
                release(fifo)

            group.start_soon(release_after_two)
            result = await mcp.client.call_tool(
                "exec_command",
                {"cmd": f"echo started; cat {fifo}", "workdir": str(tmp_path), "yield_time_ms": 30000},
                progress_callback=notes,
            )
        assert not result.is_error, result.content[0].text
        assert result.structured_content["output"] == "started\nreleased\n"
        assert result.structured_content["exit_code"] == 0
        assert len(notes.heard) >= 2
        progress = [value for value, _, _ in notes.heard]
        assert progress == sorted(progress) and progress[0] >= 0.9, progress  # seconds run
        assert all(NOTE.fullmatch(message or "") for _, _, message in notes.heard), notes.heard
        assert (notes.heard[0][2] or "").endswith(" 8 characters of new output")  # "started\n"


@pytest.mark.parametrize("mode", list(REVISIONS))
@pytest.mark.parametrize("transport", list(TRANSPORTS))
async def test_a_cancel_ends_the_wait_and_the_command_goes_on(
    tmp_path: Path, transport: str, mode: str
) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    async with TRANSPORTS[transport](tmp_path, mode, progress_interval_ms=EVERY_MS) as mcp:
        handle = await cancelled_while_waiting(
            mcp, "exec_command", {"cmd": f"echo before; cat {fifo}", "workdir": str(tmp_path)}
        )
        cancelled_at = time.monotonic()
        # The wait is over: a poll gets the session at once, and the output the cancelled
        # call did not take.
        polled = await mcp.write(handle, yield_time_ms=100)
        assert time.monotonic() - cancelled_at < scaled(10), "the cancelled wait still held the session"
        assert polled["output"] == "before\n" and "exit_code" not in polled, polled
        # The same for a cancelled write_stdin, which holds the session while it waits: the
        # next poll gets it at once (well before the 30 s yield the cancelled call asked for).
        await cancelled_while_waiting(mcp, "write_stdin", {"session_handle": handle})
        cancelled_at = time.monotonic()
        polled = await mcp.write(handle, yield_time_ms=100)
        assert time.monotonic() - cancelled_at < scaled(10), "the cancelled wait still held the session"
        assert polled["status"] == "running", polled
        release(fifo)
        output, final = await mcp.drain(handle)
        assert output == "released\n" and final["exit_code"] == 0, (output, final)


def test_no_progress_without_a_token(tmp_path: Path) -> None:
    """A client that gave no token hears nothing but the result (stdio, raw)."""
    with gateway_env(progress_interval_ms=EVERY_MS) as env:
        gateway = RawStdioGateway(env)
        try:
            gateway.send_line(
                '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"exec_command",'
                f'"arguments":{{"cmd":"sleep 3; echo slept","workdir":"{tmp_path}","yield_time_ms":20000}}}}}}'
            )
            answer = gateway.next_message(timeout=scaled(30))
            assert answer.get("id") == 7, answer  # no notification came before it
            assert answer["result"]["structuredContent"]["output"] == "slept\n"
        finally:
            gateway.finish()
