"""A full disk: the spill file says it was cut short and why, and every history row is
completed though the disk that holds it is full (docs/output.md#spill-files,
docs/history.md#recording).

The gateway runs in a private mount namespace (``unshare -m``) with a small tmpfs over its
state directory; the namespace, and the tmpfs with it, end with the gateway's processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.gateway import GATEWAY, GatewayEnv, Mcp, gateway_env, wait_for

pytestmark = pytest.mark.timeout(90)

DISK = "4m"
ENOSPC = os.strerror(28)  # "No space left on device"


def mounting_refused() -> str | None:
    """Why a private tmpfs cannot be mounted here, or None when it can."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    with tempfile.TemporaryDirectory() as target:
        done = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "mount",
                "-t",
                "tmpfs",
                "-o",
                "size=1m",
                "zxprobe",
                target,
            ],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        return f"cannot mount a tmpfs in a private mount namespace: {done.stderr.strip() or done.returncode}"
    return None


@contextlib.asynccontextmanager
async def gateway_on_a_small_disk(genv: GatewayEnv) -> AsyncIterator[tuple[Mcp, int]]:
    """A stdio gateway whose state directory (spill files, history) is a tmpfs of DISK."""
    state = genv.state_home
    state.mkdir()
    script = f"mount -t tmpfs -o size={DISK},mode=0700 zodexfull {state} && exec {GATEWAY} stdio"
    params = StdioServerParameters(
        command="unshare",
        args=["-m", "--propagation", "private", "sh", "-c", script],
        env=genv.env(),
        cwd=str(genv.root),
    )
    async with Client(params, read_timeout_seconds=60) as client:
        mcp = Mcp(client)
        await client.list_tools()
        yield mcp, gateway_pid(genv)


def gateway_pid(genv: GatewayEnv) -> int:
    for proc in psutil.process_iter(["cmdline", "environ"]):
        cmdline: list[str] = proc.info["cmdline"] or []
        env: dict[str, str] = proc.info["environ"] or {}
        if GATEWAY in cmdline[:2] and env.get("XDG_STATE_HOME") == str(genv.state_home):
            return int(proc.pid)
    raise AssertionError("the gateway process was not found")


# Reads the history inside the gateway's mount namespace (SQLite resolves /proc/<pid>/root
# to "/", so the file cannot be opened from outside).
READ_HISTORY = """
import json, sys
from pathlib import Path
from zodex_gateway.history import HistoryStore
store = HistoryStore(Path(sys.argv[1]), recover=False)
calls = store.invocations()
handle = calls[0].session_handle if calls else None
print(json.dumps({
    "calls": [{"tool": c.tool_name, "status": c.status, "result": c.result} for c in calls],
    "process": store.process(handle) if handle else None,
}))
"""


def history_inside(pid: int, genv: GatewayEnv) -> dict[str, Any]:
    directory = genv.state_home / "zodex" / "local" / "history"
    done = subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "--", sys.executable, "-c", READ_HISTORY, str(directory)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


FLOOD = "head -c 8000000 /dev/zero | tr '\\0' x | fold -w 100"  # 8 MB into a 4 MiB disk


@pytest.fixture
def small_disk() -> None:
    reason = mounting_refused()
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.usefixtures("small_disk")
async def test_a_spill_file_cut_short_by_a_full_disk_says_so(tmp_path: Path) -> None:
    with gateway_env() as genv:
        async with gateway_on_a_small_disk(genv) as (mcp, _pid):
            r = await mcp.exec(FLOOD, str(tmp_path), yield_time_ms=30000)
    assert r["status"] == "exited" and r["exit_code"] == 0
    assert r["output_chars"] == 8_000_000 + 79_999  # fold adds no last newline
    assert r["output_file_truncated"] is True
    assert r["output_file_error"] == ENOSPC, r
    # The preview's marker line, between its head and its tail (docs/output.md#deltas-and-previews).
    markers = [line for line in r["output"].splitlines() if line.startswith("[zodex] ")]
    assert len(markers) == 1 and f"cut short ({ENOSPC})" in markers[0], markers


@pytest.mark.usefixtures("small_disk")
async def test_every_history_row_is_completed_on_a_full_disk(tmp_path: Path) -> None:
    with gateway_env() as genv:
        async with gateway_on_a_small_disk(genv) as (mcp, pid):
            r = await mcp.exec(FLOOD, str(tmp_path), yield_time_ms=30000)
            assert r["status"] == "exited"
            recorded = history_inside(pid, genv)
            assert [(c["tool"], c["status"]) for c in recorded["calls"]] == [("exec_command", "ok")]
            assert recorded["calls"][0]["result"]["summary"] == r["summary"]

            def ended() -> bool:
                return (history_inside(pid, genv)["process"] or {}).get("ended_at") is not None

            await wait_for(ended, what="the command's end to be recorded")


def test_output_file_error_is_in_the_schema() -> None:
    from zodex_gateway.mcp.tools import SESSION_RESULT

    assert SESSION_RESULT["properties"]["output_file_error"]["type"] == "string"
    assert json.dumps(SESSION_RESULT)
