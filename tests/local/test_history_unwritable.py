"""A history that cannot write refuses calls, but never a stop (docs/history.md#recording).

The history files of a real Local runtime are made immutable mid-run (``chattr +i``: as
root a chmod would not stop the writes), so SQLite's writes fail as on a broken disk.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import Mcp, comm, pid_alive, wait_for
from tests.support.local import LocalEnv, connected, local_env
from tests.support.slowdown import scaled
from zodex_gateway.history import HistoryStore
from zodex_gateway.history.capture import UNWRITABLE_REASON

pytestmark = pytest.mark.timeout(120)


def history_dir(local: LocalEnv) -> Path:
    return local.root / "state" / "zodex" / "local" / "history"


def runtime_log(local: LocalEnv) -> str:
    return (local.root / "state" / "zodex" / "local" / "logs" / "runtime.log").read_text()


@contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """Writes to ``paths`` fail (EPERM) even for root, through descriptors already open."""
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("chattr is not installed: cannot make the history unwritable for root")
    done: list[Path] = []
    try:
        for path in paths:
            flagged = subprocess.run([chattr, "+i", str(path)], capture_output=True, text=True)
            if flagged.returncode != 0:
                pytest.skip(f"this filesystem refuses chattr +i ({flagged.stderr.strip()})")
            done.append(path)
        yield
    finally:
        for path in done:
            subprocess.run([chattr, "-i", str(path)], check=True)


async def call(mcp: Mcp, conversation: str | None, tool: str, **args: Any) -> Any:
    meta = {"openai/session": conversation} if conversation else None
    return await mcp.client.call_tool(tool, args, meta=meta)


# A keystroke's call returns once its echo has been quiet for the poll settle (250 ms); on a
# loaded machine the signalled command can take longer to end. A pattern nothing prints
# makes the call wait for the exit (or the yield) instead.
UNTIL_EXIT: dict[str, Any] = {
    "yield_time_ms": min(30_000, int(scaled(10) * 1000)),
    "wait_for": "zodex: this text is never printed",
}


async def started(mcp: Mcp, workdir: Path, cmd: str) -> tuple[str, int]:
    """A running command that printed its pid first: (handle, pid)."""
    result = await call(
        mcp, "conv-a", "exec_command", cmd=f"echo pid=$$; {cmd}", workdir=str(workdir), yield_time_ms=200
    )
    data = result.structured_content
    output = data["output"]
    while "\n" not in output:
        more = await call(
            mcp, "conv-a", "write_stdin", session_handle=data["session_handle"], yield_time_ms=200
        )
        output += more.structured_content["output"]
    pid = int(output.split("pid=", 1)[1].split()[0])
    # Until the shell has exec'd the command a stop may reach the shell instead, which
    # ignores Ctrl-\ (bash always ignores SIGQUIT) and then runs the command regardless.
    program = cmd.split()[1]
    await wait_for(lambda: comm(pid) == program, what=f"{pid} to become {program}")
    return data["session_handle"], pid


async def test_stops_are_carried_out_and_logged_when_history_cannot_write(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            killed = await started(mcp, tmp_path, "exec sleep 300")
            interrupted = await started(mcp, tmp_path, "exec sleep 300")
            quit_ = await started(mcp, tmp_path, "exec sleep 300")
            ended = await started(mcp, tmp_path, "exec cat")
            db = history_dir(local) / "history.sqlite3"
            with immutable(db, db.with_name(db.name + "-wal")):
                refused = await call(mcp, "conv-a", "exec_command", cmd="echo no", workdir=str(tmp_path))
                assert refused.is_error
                [block] = refused.content
                assert block.text.startswith("history cannot record this call (disk full?): ")
                assert block.text.endswith("; nothing was run") and "\n" not in block.text
                poll = await call(mcp, "conv-a", "write_stdin", session_handle=killed[0], chars="x")
                assert poll.is_error and poll.content[0].text == block.text, "typing is not a stop"

                # The known conversation's kill, a new conversation's Ctrl-C (its agent
                # cannot be created: unattributed), a caller with no identity's Ctrl-\.
                kill = await call(mcp, "conv-a", "write_stdin", session_handle=killed[0], kill_process=True)
                ctrl_c = await call(
                    mcp, "conv-new", "write_stdin", session_handle=interrupted[0], chars="\u0003",
                    **UNTIL_EXIT,
                )  # fmt: skip
                ctrl_backslash = await call(
                    mcp, None, "write_stdin", session_handle=quit_[0], chars="\u001c", **UNTIL_EXIT
                )
                ctrl_d = await call(
                    mcp, "conv-a", "write_stdin", session_handle=ended[0], chars="\u0004", **UNTIL_EXIT
                )
                for result in (kill, ctrl_c, ctrl_backslash, ctrl_d):
                    assert not result.is_error, result.content[0].text
                    assert result.structured_content["status"] == "exited", result.structured_content
                for _handle, pid in (killed, interrupted, quit_, ended):
                    await wait_for(lambda pid=pid: not pid_alive(pid), what=f"command {pid} to end")

            log = runtime_log(local)
            # A string argument's backslash is doubled in the log (docs/security.md#logs).
            for (handle, _pid), how in (
                (killed, "kill_process"), (interrupted, "Ctrl-C"), (quit_, "Ctrl-\\\\"), (ended, "Ctrl-D")
            ):  # fmt: skip
                [line] = [line for line in log.splitlines() if json.dumps(handle) in line]
                assert (
                    f"write_stdin {how} for session {json.dumps(handle)} carried out but not recorded" in line
                )
                assert line.endswith("not recorded in history: disk I/O error"), line

            # Writable again: calls are recorded as before.
            again = await call(mcp, "conv-a", "exec_command", cmd="echo yes", workdir=str(tmp_path))
            assert not again.is_error and again.structured_content["output"] == "yes\n"
            records = json.loads(local.run("local", "history", "--format", "json").stdout)["invocations"]
            assert [r["args"].get("cmd", "") for r in records][-1] == "echo yes"
            assert not any(r["tool_name"] == "write_stdin" and r["args"].get("kill_process") for r in records)
            # The output capture outlived the failure: it stores again, and the sessions
            # whose events were lost meanwhile say so.
            with HistoryStore(history_dir(local), recover=False) as store:
                [latest] = store.invocations(last=1)
                assert latest.session_handle is not None
                await wait_for(
                    lambda: store.output(latest.session_handle or "")[0] == "yes\r\n",
                    what="the output after the failure to be stored",
                )
                for handle, _pid in (killed, interrupted, quit_, ended):
                    lost = store.process(handle) or {}
                    assert lost.get("output_incomplete_reason") == UNWRITABLE_REASON, lost
                    assert lost.get("ended_at") is not None, "its end, held meanwhile, is stored"
                assert (store.process(killed[0]) or {})["reason"] == "killed"
