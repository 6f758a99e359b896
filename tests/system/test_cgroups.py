"""Session cgroups: finding the hierarchy, refusing corrupt records, race-free placement,
one-write kills, and removal (docs/sessions.md#process-groups-and-cgroups)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cgroups import require_cgroups
from tests.support.gateway import pid_alive
from zodex_system import cgroups, runtime_cgroups

MOUNTS = (
    "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
    "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
    "cgroup2 /sys/fs/cgroup/uni\\040fied cgroup2 rw,relatime 0 0\n"
)


def test_the_cgroup2_mount_is_read_from_proc_mounts() -> None:
    assert cgroups.parse_mounts(MOUNTS) == Path("/sys/fs/cgroup/uni fied")
    assert cgroups.parse_mounts("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n") is None


def test_own_group_is_the_v2_line() -> None:
    group = cgroups.own_group()
    assert group is None or group.startswith("/")


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "no"])
def test_the_switch_turns_cgroups_off(value: str) -> None:
    assert not cgroups.wanted(value)
    assert cgroups.wanted("auto") and cgroups.wanted("on")


@pytest.mark.parametrize(
    "recorded",
    [
        "/etc",
        "relative/zodex/{rid}",
        "{mount}",
        "{mount}/zodex/other123",
        "{mount}/x/{rid}",
        "{mount}/zodex/../{rid}",
    ],
)
def test_a_corrupt_record_never_names_a_group_to_kill(tmp_path: Path, recorded: str) -> None:
    runtime_dir = tmp_path / "abc123def456"
    runtime_dir.mkdir()
    mount = cgroups.cgroup2_mount() or Path("/sys/fs/cgroup")
    (runtime_dir / cgroups.RUNTIME_FILE).write_text(recorded.format(mount=mount, rid=runtime_dir.name))
    assert cgroups.runtime_group(runtime_dir) is None
    assert runtime_cgroups.kill_runtime(runtime_dir)  # nothing to do, nothing touched


def test_a_missing_group_reads_as_empty(tmp_path: Path) -> None:
    group = cgroups.Group(tmp_path / "gone", "/gone")
    assert group.procs() == [] and not group.populated()
    assert group.wait_empty(0.1) and group.remove() and group.kill_and_remove(0.1)


@pytest.fixture
def session_groups(tmp_path: Path) -> Iterator[cgroups.SessionGroups]:
    require_cgroups()
    runtime_id = f"t{uuid.uuid4().hex[:11]}"
    runtime_dir = tmp_path / runtime_id
    runtime_dir.mkdir()
    runtime = runtime_cgroups.create_runtime_group(runtime_dir, runtime_id)
    assert runtime is not None
    try:
        groups = cgroups.SessionGroups.open(runtime_dir, "abcdefg", 1)
        assert groups is not None
        assert groups.worker.path == runtime.path / "abcdefg-1"
        yield groups
        groups.close()
        assert not groups.worker.path.exists()
    finally:
        runtime.kill_and_remove()
        runtime_cgroups.remove_runtime_group(runtime)
    assert not runtime.path.exists()


def test_a_command_is_born_in_its_group_and_killed_in_one_write(
    session_groups: cgroups.SessionGroups,
) -> None:
    home = cgroups.own_group()
    # The shell forks at once: its child must already be inside (placement before exec).
    argv = ["sh", "-c", "setsid sleep 300 & exec env -i sleep 301"]
    proc, group = session_groups.spawn_in(lambda: subprocess.Popen(argv))
    try:
        assert group is not None
        assert cgroups.own_group() == home, "the worker moves back out after the spawn"
        assert cgroups.own_group(proc.pid) == group.relative
        assert group.path == session_groups.worker.path / "s1", "numbered: /proc/<pid>/cgroup is public"
        members: list[int] = []
        deadline = 100
        while len(members) < 2 and deadline:
            members = group.procs()
            deadline -= 1
            group.wait_empty(0.02)
        assert proc.pid in members and len(members) == 2, members
        assert group.populated()
        assert group.kill()
        assert group.wait_empty(5.0)
        proc.wait(5)
        assert proc.returncode == -signal.SIGKILL
        assert not any(pid_alive(p) for p in members)
        assert group.remove() and not group.path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_signal_reaches_only_members(session_groups: cgroups.SessionGroups) -> None:
    proc, group = session_groups.spawn_in(lambda: subprocess.Popen(["sleep", "300"]))
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        assert group is not None
        assert group.signal(signal.SIGTERM) == 1
        assert proc.wait(5) == -signal.SIGTERM
        assert stranger.poll() is None
    finally:
        for p in (proc, stranger):
            p.kill()
            p.wait()


def test_a_group_holding_this_process_is_never_killed(session_groups: cgroups.SessionGroups) -> None:
    seen: list[bool] = []

    def spawn() -> int:
        inside = session_groups.worker.child("s1")
        seen.append(inside.holds("self"))
        seen.append(inside.kill())
        return os.getpid()

    _, group = session_groups.spawn_in(spawn)
    assert seen == [True, False]
    assert group is not None and group.remove()


def test_a_failed_spawn_leaves_no_group(session_groups: cgroups.SessionGroups) -> None:
    def spawn() -> None:
        raise FileNotFoundError("command not found: nope")

    with pytest.raises(FileNotFoundError):
        session_groups.spawn_in(spawn)
    assert not (session_groups.worker.path / "s1").exists()
    assert cgroups.own_group() == session_groups.home.relative


def test_the_next_group_is_made_ahead_and_used_by_the_next_spawn(
    session_groups: cgroups.SessionGroups,
) -> None:
    worker = session_groups.worker.path
    assert (worker / "s1").is_dir(), "open() makes the first session's group ahead"
    proc, group = session_groups.spawn_in(lambda: subprocess.Popen(["sleep", "300"]))
    try:
        assert group is not None and group.path == worker / "s1"
        assert cgroups.own_group(proc.pid) == group.relative
        assert cgroups.own_group() == session_groups.home.relative
        assert not (worker / "s2").exists(), "nothing is made on the spawn's path"
        session_groups.prepare()
        session_groups.prepare()  # once is enough: a second call makes nothing more
        assert sorted(p.name for p in worker.iterdir() if p.is_dir()) == ["s1", "s2"]
        assert not (worker / "s2" / "cgroup.procs").read_text().split(), "made empty"
        second, next_group = session_groups.spawn_in(lambda: subprocess.Popen(["sleep", "300"]))
        try:
            assert next_group is not None and next_group.path == worker / "s2"
            assert cgroups.own_group(second.pid) == next_group.relative
        finally:
            second.kill()
            second.wait()
        # Without a prepared group the spawn makes its own, as before.
        third, own = session_groups.spawn_in(lambda: subprocess.Popen(["true"]))
        third.wait()
        assert own is not None and own.path == worker / "s3"
    finally:
        proc.kill()
        proc.wait()


def test_without_a_usable_group_the_spawn_still_happens(tmp_path: Path) -> None:
    fake = cgroups.SessionGroups(
        cgroups.Group(tmp_path / "missing", "/missing"), cgroups.Group(tmp_path, "/")
    )
    result, group = fake.spawn_in(lambda: 42)
    assert (result, group) == (42, None)
    assert not fake.enabled  # later sessions go straight to the marker sweep


def test_a_new_runtime_sweeps_what_dead_runtimes_left(tmp_path: Path) -> None:
    require_cgroups()
    mount, own = cgroups.cgroup2_mount(), cgroups.own_group()
    assert mount is not None and own is not None
    base = cgroups.Group(mount / own.lstrip("/"), own).child(cgroups.BASE_NAME)
    base.path.mkdir(exist_ok=True)
    names = {kind: f"t{kind}{uuid.uuid4().hex[:8]}" for kind in ("dead", "live", "bare", "busy")}
    stale = {kind: base.child(name) for kind, name in names.items()}
    namespace = os.readlink("/proc/self/ns/pid")
    ended = subprocess.Popen(["true"])
    ended.wait()
    sleepers: list[subprocess.Popen[bytes]] = []
    runtime: cgroups.Group | None = None
    try:
        for group in stale.values():
            group.path.mkdir()
        owners = {"dead": f"{namespace} {ended.pid} 1", "live": runtime_cgroups._owner_tag()}
        for kind, tag in owners.items():
            os.setxattr(stale[kind].path, runtime_cgroups.OWNER_XATTR, tag.encode())
        for kind in ("dead", "busy"):  # each holds a command its runtime left behind
            sleeper = subprocess.Popen(["sleep", "300"])
            sleepers.append(sleeper)
            (stale[kind].path / "cgroup.procs").write_text(str(sleeper.pid))
        runtime_dir = tmp_path / f"t{uuid.uuid4().hex[:11]}"
        runtime_dir.mkdir()
        runtime = runtime_cgroups.create_runtime_group(runtime_dir, runtime_dir.name)
        assert runtime is not None
        assert not stale["dead"].path.exists(), "a dead owner's group is killed and removed"
        assert sleepers[0].wait(5) == -signal.SIGKILL
        assert stale["live"].path.is_dir(), "a live owner's group is kept"
        assert not stale["bare"].path.exists(), "an empty group with no owner is removed"
        assert stale["busy"].path.is_dir() and sleepers[1].poll() is None, (
            "an unknown owner's command is left"
        )
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        for group in [*stale.values(), *([runtime] if runtime else [])]:
            group.kill_and_remove(5.0)
        with contextlib.suppress(OSError):
            base.path.rmdir()
