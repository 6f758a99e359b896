"""A command starts with every signal at its default and none blocked, as a terminal starts a
login shell, whatever the gateway inherited: one started from a script's background job or
by nohup has SIGINT, SIGQUIT or SIGHUP ignored, and its commands would otherwise ignore Ctrl-C
and Ctrl-\\ too (docs/sessions.md#signals)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.gateway import GATEWAY, Mcp, comm, gateway_env, pid_alive, wait_for

pytestmark = pytest.mark.timeout(120)

# What a background job of a non-interactive shell, or nohup, hands the gateway; plus a
# blocked signal, which exec keeps too.
IGNORING_START = (
    "import os, signal, sys\n"
    "for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM):\n"
    "    signal.signal(sig, signal.SIG_IGN)\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)
# Signals 32 and 33 are the C library's own (glibc's posix_spawn leaves them ignored): not ours.
OURS = (1 << 31) - 1


@contextlib.asynccontextmanager
async def ignoring_gateway() -> AsyncIterator[Mcp]:
    with gateway_env() as env:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-c", IGNORING_START, GATEWAY, "stdio"],
            env=env.env(),
            cwd=str(env.root),
        )
        async with Client(params, read_timeout_seconds=120) as client:
            yield Mcp(client)


def signal_masks(status: str) -> dict[str, int]:
    return {
        line.split(":")[0]: int(line.split()[1], 16)
        for line in status.splitlines()
        if line.startswith(("SigIgn:", "SigBlk:"))
    }


async def test_a_command_ignores_and_blocks_nothing_its_gateway_inherited(tmp_path: Path) -> None:
    async with ignoring_gateway() as mcp:
        result = await mcp.exec("exec grep -E '^Sig(Ign|Blk)' /proc/self/status", str(tmp_path))
    masks = signal_masks(result["output"])
    assert set(masks) == {"SigIgn", "SigBlk"}, result["output"]
    assert masks["SigIgn"] & OURS == 0, f"ignored: {masks['SigIgn']:#x}"
    assert masks["SigBlk"] == 0, f"blocked: {masks['SigBlk']:#x}"


@pytest.mark.parametrize(("keys", "signal_number"), [("\u0003", signal.SIGINT), ("\u001c", signal.SIGQUIT)])
async def test_ctrl_c_and_ctrl_backslash_end_a_command_of_such_a_gateway(
    tmp_path: Path, keys: str, signal_number: int
) -> None:
    async with ignoring_gateway() as mcp:
        started = await mcp.exec("echo pid=$$; exec sleep 300", str(tmp_path), yield_time_ms=200)
        out = await mcp.output_until(started["session_handle"], "\n", started["output"])
        pid = int(out.split("pid=", 1)[1].split()[0])
        await wait_for(lambda: comm(pid) == "sleep", what="the shell to exec sleep")
        await mcp.write(started["session_handle"], chars=keys, yield_time_ms=0)
        _out, final = await mcp.drain(started["session_handle"])
    assert final["signal"] == signal.Signals(signal_number).name, final
    assert not pid_alive(pid)
