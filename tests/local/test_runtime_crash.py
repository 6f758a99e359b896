"""A runtime killed by a fatal signal says why: the fault's traceback in runtime.log, and
`zodex local status` reporting it crashed (docs/modes.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.gateway import pid_alive, wait_for
from tests.support.local import LocalEnv, local_env

pytestmark = pytest.mark.timeout(120)

ACCEPT = "application/json, text/event-stream"


def post(local: LocalEnv, body: dict[str, Any], session: str | None = None) -> httpx2.Response:
    discovery = local.discovery()
    headers = {
        "X-Zodex-Local-Token": Path(discovery["mcp"]["token_path"]).read_text().strip(),
        "Accept": ACCEPT,
    }
    if session:
        headers["Mcp-Session-Id"] = session
    return httpx2.post(discovery["mcp"]["url"], json=body, headers=headers, timeout=20)


def initialize(local: LocalEnv) -> str:
    params = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    response = post(local, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    assert response.status_code == 200
    return response.headers.get("mcp-session-id", "")


def exec_call(local: LocalEnv, session: str, workdir: Path) -> httpx2.Response:
    params = {"name": "exec_command", "arguments": {"cmd": "echo hi", "workdir": str(workdir)}}
    return post(local, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}, session)


async def test_a_runtime_killed_by_sigbus_is_reported_crashed(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        pid = local.discovery()["pid"]
        session = initialize(local)
        assert exec_call(local, session, tmp_path).status_code == 200
        # Cutting the -shm file short under SQLite's shared mapping: the daemon's next
        # history access touches pages the file no longer has, and the kernel sends SIGBUS.
        shm = local.root / "state" / "zodex" / "local" / "history" / "history.sqlite3-shm"
        os.truncate(shm, 0)
        with pytest.raises(httpx2.HTTPError):
            exec_call(local, session, tmp_path)
        await wait_for(lambda: not pid_alive(pid), what="the runtime to die of SIGBUS")

        log = (local.root / "state" / "zodex" / "local" / "logs" / "runtime.log").read_text()
        assert "Fatal Python error: Bus error" in log
        trace = log.split("Fatal Python error: Bus error", 1)[1]
        assert "Current thread" in trace and 'File "' in trace and "history" in trace

        status = local.status()
        assert status["running"] is False and status["crashed"] is True, status
        assert status["pid"] == pid and status["signal"] == "SIGBUS"
        assert status["reason"] == "Fatal Python error: Bus error (SIGBUS)"
        assert status["log"][0] == "Fatal Python error: Bus error"
        assert status["log"][1].startswith("Current thread ") and 'File "' in status["log"][2]
        text = local.run("local", "status").stdout
        assert text.startswith(f"Zodex Local crashed (runtime {status['runtime_id']}, pid {pid}): ")
        assert "Fatal Python error: Bus error (SIGBUS)" in text.splitlines()[0]

        local.run("local", "stop")
        assert local.status() == {"running": False, "active_process_count": 0}


async def test_a_runtime_gone_without_a_trace_is_reported_crashed_too(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        pid = local.discovery()["pid"]
        os.kill(pid, signal.SIGKILL)
        await wait_for(lambda: not pid_alive(pid), what="the runtime to die")
        status = local.status()
        assert status["crashed"] is True and status["signal"] is None and status["log"] == []
        assert "does not say why (killed by SIGKILL or the out-of-memory killer?)" in status["reason"]


def test_the_fault_trace_follows_the_log_rotation(tmp_path: Path) -> None:
    """faulthandler writes to fd 2, which the log handler moves to each new file."""
    script = (
        "import logging, os, signal\n"
        "from zodex_gateway.local import daemon\n"
        "from zodex_gateway.local.paths import LocalPaths\n"
        "daemon.LOG_BYTES = 4000\n"
        "paths = LocalPaths.from_env()\n"
        "paths.create()\n"
        "daemon._setup_logging(paths)\n"
        "for i in range(200):\n"
        "    logging.getLogger('zodex.local').info('filler %d %s', i, 'x' * 60)\n"
        "os.kill(os.getpid(), signal.SIGBUS)\n"
    )
    local = LocalEnv(tmp_path)
    (tmp_path / "run").mkdir(mode=0o700)
    done = subprocess.run(
        [sys.executable, "-c", script], env=local.env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGBUS, done.stderr
    logs = tmp_path / "state" / "zodex" / "local" / "logs"
    assert (logs / "runtime.log.1").exists(), "the log was rotated"
    current = (logs / "runtime.log").read_text()
    assert "filler 199" in current and "Fatal Python error: Bus error" in current
    assert "Fatal Python error" not in (logs / "runtime.log.1").read_text()
