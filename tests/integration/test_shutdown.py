"""Stopping a gateway leaves nothing behind (docs/config.md#fixed-numbers: a stop within 10 s)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from pathlib import Path

import pytest

from tests.support.gateway import GatewayEnv, http_client, pid_alive, start_http_gateway, wait_for
from tests.support.poll_probe import TYPED, PollProbe
from tests.support.raw_stdio import RawStdioGateway
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(60)

# A grouped and an escaped child, then (FAMILY) waiting for both.
FAMILY_PREFIX = "sleep 300 & echo grp=$!; setsid sleep 301 & echo sid=$!"
FAMILY = f"{FAMILY_PREFIX}; echo ready; wait"


def start_sessions(gateway: RawStdioGateway, dirs: list[Path]) -> list[int]:
    """A long command with a grouped and an escaped child in each workdir; their pids."""
    pids: list[int] = []
    for d in dirs:
        result = gateway.call("exec_command", cmd=FAMILY, workdir=str(d), yield_time_ms=1000)
        text = json.loads(result["content"][0]["text"])
        assert text["status"] == "running", text
        pids += [int(p) for p in re.findall(r"=(\d+)", text["output"])]
    assert len(pids) == 2 * len(dirs)
    return pids


def worker_pids(genv: GatewayEnv) -> list[int]:
    pids = []
    for runtime in genv.runtime_dirs():
        for path in (runtime / "w").glob("*.json"):
            record = WorkerRecord.read(path)
            if record is not None:
                pids.append(record.pid)
    return pids


@pytest.mark.parametrize("how", ["stdin-closed", "SIGTERM", "SIGINT", "SIGKILL"])
async def test_gateway_stop_leaves_nothing_behind(genv: GatewayEnv, tmp_path: Path, how: str) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    gateway = RawStdioGateway(genv)
    try:
        commands = start_sessions(gateway, dirs)
        workers = worker_pids(genv)
        assert len(workers) == 2
        everything = [*commands, *workers]
        assert all(pid_alive(p) for p in everything)
        started = time.monotonic()
        if how == "stdin-closed":
            gateway.close_stdin()
        else:
            gateway.process.send_signal(getattr(signal, how))
        await wait_for(lambda: gateway.process.poll() is not None, timeout=10, what="the gateway to exit")
        await wait_for(
            lambda: not any(pid_alive(p) for p in everything),
            timeout=10,
            what="workers and commands to be gone",
        )
        assert time.monotonic() - started < 10
        if how != "SIGKILL":
            assert gateway.process.returncode == 0
            assert genv.runtime_dirs() == [], "the owner removes its runtime directory"
    finally:
        gateway.finish()


async def test_http_gateway_sigterm_with_a_poll_in_flight(genv: GatewayEnv, tmp_path: Path) -> None:
    probe = PollProbe.make(genv.root)
    gateway = start_http_gateway(genv)
    try:
        async with http_client(gateway.url, {"X-Zodex-Local-Token": gateway.token}) as mcp:
            r = await mcp.exec(f"{FAMILY_PREFIX}; {probe.command}", str(tmp_path), yield_time_ms=50)
            out = await mcp.output_until(r["session_handle"], "ready", r["output"])
            commands = [int(p) for p in re.findall(r"=(\d+)", out)]
            assert len(commands) == 2, out
            workers = worker_pids(genv)
            poll = asyncio.create_task(
                mcp.call("write_stdin", session_handle=r["session_handle"], chars=TYPED, yield_time_ms=60000)
            )
            # The poll is waiting in the worker when the signal lands.
            await wait_for(probe.reached, what="the poll to reach the worker")
            started = time.monotonic()
            gateway.process.send_signal(signal.SIGTERM)
            await wait_for(lambda: gateway.process.poll() is not None, timeout=10, what="the gateway to exit")
            poll.cancel()
        everything = [*commands, *workers]
        await wait_for(lambda: not any(pid_alive(p) for p in everything), timeout=10, what="everything gone")
        assert time.monotonic() - started < 10
        assert gateway.process.returncode == 0
    finally:
        gateway.stop()
