"""History keeps what a call waited for and how the wait ended (docs/history.md#recording):
the pattern is one of the call's arguments, the outcome part of its result, both as the
model sent and got them — read back with ``zodex local history --raw``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.local import connected, local_env


async def test_the_pattern_and_the_outcome_are_recorded(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            done = await mcp.exec(
                "echo warming; echo 'Listening on 8000'; sleep 30", str(tmp_path),
                wait_for="Listening on \\d+", yield_time_ms=20000,
            )  # fmt: skip
            assert (done["wait"], done["matched_text"]) == ("matched", "Listening on 8000"), done
            await mcp.write(done["session_handle"], kill_process=True)
        shown = json.loads(local.run("local", "history", "--raw", "--format", "json").stdout)
    calls = shown["invocations"] if isinstance(shown, dict) else shown
    (execs,) = [call for call in calls if call["tool_name"] == "exec_command"]
    assert execs["args"]["wait_for"] == "Listening on \\d+", execs
    assert execs["result"]["wait"] == "matched" and execs["result"]["matched_text"] == "Listening on 8000"
