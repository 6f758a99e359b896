"""A runtime directory removed under a running gateway is made again (its workers' handles
answer lost), and a gateway that died by SIGKILL has its directory removed by the next one
(docs/sessions.md#after-exit, docs/security.md#state-directories)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.support.gateway import (
    gateway_env,
    http_client,
    pid_alive,
    start_http_gateway,
    stdio_gateway,
    wait_for,
)
from zodex_protocol.layout import RuntimeLayout, WorkerRecord

pytestmark = pytest.mark.timeout(90)

# Ignores the PTY hang-up, so only the gateway's clean-up of a lost session ends it.
STUBBORN = "trap '' HUP; echo pid=$$; while :; do sleep 0.05; done"


def live_workers(root: Path) -> list[WorkerRecord]:
    found = []
    for path in (root / "w").glob("*.json"):
        record = WorkerRecord.read(path)
        if record is not None and pid_alive(record.pid):
            found.append(record)
    return found


async def test_removed_runtime_directory_is_made_again(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec(STUBBORN, str(first), yield_time_ms=500)
            shell = int(r["output"].split("pid=")[1].split()[0])
            [root] = genv.runtime_dirs()
            [old_worker] = live_workers(root)
            key = (root / "key").read_bytes()

            shutil.rmtree(genv.runtime_home / "zodex")

            handle = r["session_handle"]
            lost = await mcp.error("write_stdin", session_handle=handle)
            assert lost == (
                f"session {handle} was lost: the worker for {os.path.realpath(first)} "
                "exited unexpectedly; start the command again"
            )
            await wait_for(lambda: not pid_alive(shell), what="the lost session's command to be ended")
            await wait_for(lambda: not pid_alive(old_worker.pid), what="the unreachable worker to be ended")
            layout = RuntimeLayout(root)
            assert layout.key_file.read_bytes() == key, "the same key: workers keep verifying"
            assert layout.runtime_lock.exists() and layout.owner_file.exists()

            # New workdirs, and the old one, get working workers (which do not mistake the
            # new lock for a dead owner).
            fresh = await mcp.exec("sleep 30", str(second), yield_time_ms=50)
            polled = await mcp.write(fresh["session_handle"], yield_time_ms=50)
            assert polled["status"] == "running"
            again = await mcp.exec("echo back", str(first))
            assert again["output"] == "back\n"
            assert {w.workdir: w.incarnation for w in live_workers(root)}[os.path.realpath(first)] == 2
            assert (await mcp.error("write_stdin", session_handle=handle)).startswith(
                f"session {handle} was lost"
            )
            await mcp.write(fresh["session_handle"], kill_process=True)
        assert genv.runtime_dirs() == [], "a clean stop still removes the directory"


async def test_next_gateway_removes_the_directory_of_a_killed_one(tmp_path: Path) -> None:
    with gateway_env() as genv:
        survivor = start_http_gateway(genv)
        kept = genv.runtime_dirs()
        killed = start_http_gateway(genv)
        try:
            [killed_dir] = [d for d in genv.runtime_dirs() if d not in kept]
            async with http_client(killed.url, {"X-Zodex-Local-Token": killed.token}) as mcp:
                assert (await mcp.exec("echo hi", str(tmp_path)))["output"] == "hi\n"
            [worker] = live_workers(killed_dir)
            killed.process.send_signal(signal.SIGKILL)
            killed.process.wait()
            await wait_for(lambda: not pid_alive(worker.pid), what="the worker to see its owner gone")
            assert (killed_dir / "key").exists(), "SIGKILL leaves the directory behind"

            async with stdio_gateway(genv) as mcp:
                assert (await mcp.exec("echo hi", str(tmp_path)))["output"] == "hi\n"
                remaining = genv.runtime_dirs()
                assert killed_dir not in remaining, "the dead gateway's directory is removed"
                assert len(remaining) == 2, "the live gateway's directory and the new one stay"
        finally:
            survivor.stop()
            killed.stop()
