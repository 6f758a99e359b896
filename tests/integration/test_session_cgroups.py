"""Processes that clear their environment and leave their process group still end with
their session: each session has its own cgroup where the machine allows, and the marker
sweep is the fallback (docs/sessions.md#process-groups-and-cgroups)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cgroups import GroupTracker, group_of, require_cgroups, tracked_groups
from tests.support.gateway import GatewayEnv, Mcp, pid_alive, stdio_gateway, wait_for
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(90)

# Two escapees that no environment marker finds: one drops the markers, one clears its
# whole environment; both leave the process group (setsid) and are orphaned (subshell).
ESCAPEES = (
    "(env -u ZODEX_SESSION_HANDLE -u ZODEX_RUNTIME_ID setsid sleep 901 & echo esc=$!); "
    "(env -i setsid sleep 902 & echo clean=$!); "
)
RUNNING = ESCAPEES + "echo ready; sleep 300"


@pytest.fixture
def groups() -> Iterator[GroupTracker]:
    require_cgroups()
    with tracked_groups() as tracker:
        yield tracker


def pids_in(output: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", output)}


async def start_escapees(mcp: Mcp, workdir: Path) -> tuple[str, dict[str, int]]:
    r = await mcp.exec(RUNNING, str(workdir), yield_time_ms=2000)
    out = await mcp.output_until(r["session_handle"], "ready", r["output"])
    pids = pids_in(out)
    assert set(pids) == {"esc", "clean"}, out
    return r["session_handle"], pids


def reap(pids: dict[str, int]) -> None:
    """Clean-up for the code under test failing: no sleeper outlives the test."""
    for pid in pids.values():
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def runtime_dir(genv: GatewayEnv) -> Path:
    (found,) = genv.runtime_dirs()
    return found


async def test_kill_process_ends_escapees_that_cleared_their_environment(
    genv: GatewayEnv, groups: GroupTracker, tmp_path: Path
) -> None:
    pids: dict[str, int] = {}
    try:
        async with stdio_gateway(genv) as mcp:
            handle, pids = await start_escapees(mcp, tmp_path)
            group = groups.track(runtime_dir(genv))
            assert group is not None and group.is_dir()
            own = group_of(pids["esc"])
            assert own is not None
            session_group = group / own.rsplit("/", 2)[-2] / own.rsplit("/", 1)[-1]
            assert session_group.is_dir(), own
            killed = await mcp.write(handle, kill_process=True)
            assert killed["status"] == "exited" and killed["termination_reason"] == "killed"
            for name, pid in pids.items():
                await wait_for(lambda pid=pid: not pid_alive(pid), what=f"{name} ({pid}) to be killed")
            assert not session_group.exists(), "a killed session's cgroup is removed"
            # Only the group made ahead for the next session may be left, and it is empty.
            left = [p for p in group.glob("*/s*") if p.is_dir()]
            assert len(left) <= 1 and all(not (p / "cgroup.procs").read_text().split() for p in left), left
        assert not group.exists(), "the runtime's cgroup is removed when the gateway stops"
    finally:
        reap(pids)


async def test_escapees_are_counted_from_the_session_cgroup(
    genv: GatewayEnv, groups: GroupTracker, tmp_path: Path
) -> None:
    pids: dict[str, int] = {}
    try:
        async with stdio_gateway(genv) as mcp:
            # Ignoring HUP (inherited) keeps an escapee that has not called setsid yet from
            # dying with the terminal when the shell exits at once.
            r = await mcp.exec("trap '' HUP; " + ESCAPEES + "echo started", str(tmp_path), yield_time_ms=5000)
            pids = pids_in(r["output"])
            assert r["status"] == "exited", r
            assert r["summary"].endswith("; 2 background processes still running"), r["summary"]
            group = groups.track(runtime_dir(genv))
            assert group is not None
            members = {name: group_of(pid) or "" for name, pid in pids.items()}
            assert all(f"/zodex/{group.name}/" in g for g in members.values()), members
        # Stopping the gateway ends them with the rest of the runtime.
        for name, pid in pids.items():
            await wait_for(lambda pid=pid: not pid_alive(pid), what=f"{name} ({pid}) to end with the runtime")
        assert not group.exists()
    finally:
        reap(pids)


async def test_a_killed_worker_takes_its_escapees_along(
    genv: GatewayEnv, groups: GroupTracker, tmp_path: Path
) -> None:
    pids: dict[str, int] = {}
    try:
        async with stdio_gateway(genv) as mcp:
            handle, pids = await start_escapees(mcp, tmp_path)
            root = runtime_dir(genv)
            group = groups.track(root)
            (record_file,) = (root / "w").glob("*.json")
            record = WorkerRecord.read(record_file)
            assert record is not None
            os.kill(record.pid, signal.SIGKILL)
            for name, pid in pids.items():
                await wait_for(
                    lambda pid=pid: not pid_alive(pid), what=f"{name} ({pid}) to die with its worker"
                )
            assert (await mcp.error("write_stdin", session_handle=handle)).startswith(
                f"session {handle} was lost"
            )
            assert group is not None
            worker_group = group / f"{record.worker_id}-{record.incarnation}"
            await wait_for(lambda: not worker_group.exists(), what="the dead worker's cgroup to be removed")
    finally:
        reap(pids)


async def test_the_marker_sweep_when_cgroups_are_off(genv: GatewayEnv, tmp_path: Path) -> None:
    """``ZODEX_CGROUPS=off`` (``session.cgroups = off`` in Local): no group is made, and a
    setsid orphan that kept its marker is still found and killed."""
    genv.extra["ZODEX_CGROUPS"] = "off"
    # The orphan says "ready" itself: it prints after the shell has printed sid.
    family = "setsid sleep 901 & echo sid=$!; ( setsid sh -c 'sleep 902 & echo orphan=$! ready; wait' & ); sleep 300"
    pids: dict[str, int] = {}
    try:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec(family, str(tmp_path), yield_time_ms=2000)
            out = await mcp.output_until(r["session_handle"], "ready", r["output"])
            pids = pids_in(out)
            assert set(pids) == {"orphan", "sid"}, out
            assert not (runtime_dir(genv) / "cgroup").exists()
            assert all("/zodex/" not in (group_of(pid) or "") for pid in pids.values())
            await mcp.write(r["session_handle"], kill_process=True)
            for name, pid in pids.items():
                await wait_for(lambda pid=pid: not pid_alive(pid), what=f"{name} ({pid}) to be killed")
    finally:
        reap(pids)


async def test_kill_process_ends_what_su_started(
    genv: GatewayEnv, groups: GroupTracker, tmp_path: Path
) -> None:
    """`su -` resets the environment (no marker survives) and runs as another account."""
    if os.geteuid() != 0:
        pytest.skip("su to another account without a password needs root")
    if Path("/run/systemd/system").exists():
        pytest.skip("with systemd, pam_systemd may move an su session into a logind scope of its own")
    cmd = "(su - -s /bin/sh nobody -c 'setsid sleep 904 & echo su=$!' 2>/dev/null); echo ready; sleep 300"
    pids: dict[str, int] = {}
    try:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec(cmd, str(tmp_path), yield_time_ms=3000)
            out = await mcp.output_until(r["session_handle"], "ready", r["output"])
            pids = pids_in(out)
            assert set(pids) == {"su"}, out
            assert "ZODEX_SESSION_HANDLE" not in Path(f"/proc/{pids['su']}/environ").read_bytes().decode()
            await mcp.write(r["session_handle"], kill_process=True)
            await wait_for(lambda: not pid_alive(pids["su"]), what="the su escapee to be killed")
            groups.track(runtime_dir(genv))
    finally:
        reap(pids)
