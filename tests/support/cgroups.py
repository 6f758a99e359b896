"""Session cgroups in tests: whether this machine allows them, which group a runtime got,
and removing every group a test made, whatever happened.

Written against the kernel's files, not ``zodex_system.cgroups``, so a test still runs (and
fails for the right reason) against code that has no cgroups at all.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_until


def cgroup2_mount() -> Path | None:
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "cgroup2":
                return Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1]))
    return None


def group_of(pid: int | str) -> str | None:
    """A process's v2 group path ("0::/path"), None when it is gone."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        return None
    return None


def unusable_reason() -> str | None:
    """Why session cgroups cannot work here (None when they can): the same test the
    runtime makes — a group of our own, with ``cgroup.kill``, under our group."""
    mount, own = cgroup2_mount(), group_of("self")
    if mount is None or own is None:
        return "no cgroup2 file system is mounted"
    if not os.access(mount / own.lstrip("/") / "cgroup.procs", os.W_OK):
        return "no writable cgroup2 group (needs root or a delegated user slice)"
    probe = mount / own.lstrip("/") / f"zodex-test-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as exc:
        return f"cannot create a cgroup: {exc.strerror}"
    try:
        if not (probe / "cgroup.kill").exists():
            return "cgroup.kill is missing (Linux older than 5.14)"
    finally:
        probe.rmdir()
    return None


def require_cgroups() -> None:
    reason = unusable_reason()
    if reason is not None:
        pytest.skip(f"session cgroups unavailable: {reason}")


def runtime_group(runtime_dir: Path) -> Path | None:
    """The group a runtime recorded in its directory, if any."""
    try:
        return Path((runtime_dir / "cgroup").read_text().strip())
    except OSError:
        return None


def kill_and_remove(group: Path, timeout: float = 10.0) -> None:
    """Kill everything in ``group`` and remove it and its descendants (test clean-up)."""
    if not group.is_dir():
        return
    with contextlib.suppress(OSError):
        (group / "cgroup.kill").write_text("1")

    def emptied() -> bool:
        try:
            return "populated 0" in (group / "cgroup.events").read_text()
        except OSError:
            return False

    # Clean-up only (the product waits on the file's POLLPRI event): what cannot be removed
    # in time is left, not raised over the test's own outcome.
    with contextlib.suppress(AssertionError):
        wait_until(emptied, timeout, f"{group} to empty")
    for root, _dirs, _files in os.walk(group, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(root)


class GroupTracker:
    """Remembers the runtime groups a test's runtimes made, to check and clean them."""

    def __init__(self) -> None:
        self.groups: list[Path] = []

    def track(self, runtime_dir: Path) -> Path | None:
        group = runtime_group(runtime_dir)
        if group is not None and group not in self.groups:
            self.groups.append(group)
        return group


@contextlib.contextmanager
def tracked_groups() -> Iterator[GroupTracker]:
    tracker = GroupTracker()
    try:
        yield tracker
    finally:
        for group in tracker.groups:
            kill_and_remove(group)
