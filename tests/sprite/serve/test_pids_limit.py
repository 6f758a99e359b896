"""The agent cannot outlive the stop by using up the pids it shares with the service
(docs/sprite.md#privilege-separation): a real ``zodex sprite serve`` in a pids cgroup, an agent that
forks until the limit, then the stop. Root only; needs a pids controller."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sprite.serve.sprite_support import sprite_setup, tool_json
from tests.support.accounts import require_root, throwaway_account
from tests.support.waiting import wait_until
from zodex_gateway.sprite.agent_processes import processes_of

pytestmark = pytest.mark.timeout(180)

PIDS_MAX = 150


def pids_hierarchy() -> tuple[Path, str] | None:
    """Where the pids controller is, from /proc/mounts: a v1 ``pids`` hierarchy (the hybrid
    layout here) or the v2 file system when it offers ``pids``; and the file to limit it."""
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            _, where, kind, options = line.split()[:4]
            path = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), where))
            if kind == "cgroup" and "pids" in options.split(","):
                return path, "pids.max"
            if kind == "cgroup2" and "pids" in (path / "cgroup.controllers").read_text().split():
                return path, "pids.max"
    return None


@contextlib.contextmanager
def pids_group() -> Iterator[Path]:
    found = pids_hierarchy()
    if found is None:
        pytest.skip("no pids cgroup controller is mounted")
    root, _ = found
    group = root / f"zodex-test-pids-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "pids.max").write_text(f"{PIDS_MAX}\n")
        yield group
    finally:
        for _ in range(50):
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            wait_until(
                lambda: not (group / "cgroup.procs").read_text().split(),
                timeout=10,
                what="the group to empty",
            )
        group.rmdir()


@pytest.mark.parametrize("cgroups", ["on", "off"], ids=["session cgroups", "no session cgroups"])
async def test_an_agent_that_used_up_its_pids_is_killed_at_the_stop(cgroups: str) -> None:
    """Without session cgroups (a container that delegates none, or ``session.cgroups =
    off``) only the helper's own kill reaches the agent, and it can fork nothing."""
    require_root()
    with pids_group() as group, sprite_setup(start=False, tables={"session": {"cgroups": cgroups}}) as sprite:
        enter = ("sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh")
        sprite.start(enter)
        async with sprite.mcp() as mcp:
            forked = tool_json(
                await mcp.call_tool(
                    "exec_command",
                    {
                        "cmd": "for i in $(seq 16); do env -i setsid sh -c 'while :; do sleep 1000 & done' & done 2>/dev/null; sleep 1000",
                        "workdir": str(sprite.workspace),
                        "yield_time_ms": 50,
                    },
                )
            )
            assert forked["status"] == "running"
            current = group / "pids.current"
            wait_until(
                lambda: int(current.read_text()) >= PIDS_MAX, timeout=60, what="the agent to use up its pids"
            )
        assert len(processes_of(sprite.agent.uid)) > 100
        sprite.stop()
        left = processes_of(sprite.agent.uid)
        assert left == [], (
            f"{len(left)} processes of the agent outlived the stop: {sprite.extra.get('output', '')[-2000:]}"
        )


def test_the_helpers_kill_needs_no_fork() -> None:
    """kill_all in a process that cannot fork (its pids group is full): every process of
    the account is still killed, and kill_all returns instead of raising."""
    require_root()
    with pids_group() as group, throwaway_account("zk") as agent:
        agent_procs = [
            subprocess.Popen(
                [
                    "setpriv",
                    f"--reuid={agent.uid}",
                    f"--regid={agent.gid}",
                    "--clear-groups",
                    "setsid",
                    "sleep",
                    "1000",
                ]
            )
            for _ in range(5)
        ]
        wait_until(lambda: len(processes_of(agent.uid)) == 5, timeout=30, what="the agent's processes")
        script = (
            "import os, sys\n"
            "from pathlib import Path\n"
            "from zodex_gateway.sprite.agent_processes import AgentAccount, kill_all\n"
            f"Path({str(group)!r}, 'cgroup.procs').write_text(str(os.getpid()))\n"
            f"Path({str(group)!r}, 'pids.max').write_text('1')\n"
            "try:\n"
            "    os.fork()\n"
            "except OSError as exc:\n"
            "    print('fork refused:', exc.strerror, flush=True)\n"
            f"print(kill_all(AgentAccount({agent.name!r}, {agent.uid}, {agent.gid}, Path('/'))))\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        for proc in agent_procs:
            proc.wait(10)
        assert done.stdout.splitlines() == ["fork refused: Resource temporarily unavailable", "True"], (
            done.stderr
        )
        assert processes_of(agent.uid) == []
