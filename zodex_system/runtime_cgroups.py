"""A runtime's cgroup (docs/sessions.md#process-groups-and-cgroups), from the gateway's side:
made by the owning gateway as ``<its own group>/zodex/<runtime id>`` and named in
``<runtime dir>/cgroup``; marked with its owner, so a later runtime can sweep the groups of
runtimes that died without cleaning up; killed and removed by the shutdown, by
``zodex local stop`` or by the clean-up after a crash. Groups themselves, and a worker's
session groups inside this one, are :mod:`zodex_system.cgroups`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from zodex_system import proctree
from zodex_system.cgroups import (
    BASE_NAME,
    ID_RE,
    RUNTIME_FILE,
    Group,
    cgroup2_mount,
    own_group,
    runtime_group,
)

log = logging.getLogger("zodex.cgroups")

OWNER_XATTR = "user.zodex.owner"  # on a runtime group: who owns it (see sweep_abandoned)


def create_runtime_group(runtime_dir: Path, runtime_id: str) -> Group | None:
    """Owner gateway: make ``<own group>/zodex/<runtime id>`` and record it in the runtime
    directory. None (logged once) where the machine does not let us."""
    reason = _create_runtime_group(runtime_dir, runtime_id)
    if isinstance(reason, Group):
        return reason
    log.info("session cgroups unavailable (%s); using the environment-marker sweep", reason)
    return None


def _create_runtime_group(runtime_dir: Path, runtime_id: str) -> Group | str:
    if not ID_RE.match(runtime_id):
        return f"unexpected runtime id {runtime_id!r}"
    mount = cgroup2_mount()
    if mount is None:
        return "no cgroup2 file system is mounted"
    own = own_group()
    if own is None:
        return "this process has no cgroup v2 group"
    home = Group(mount / own.lstrip("/"), own)
    if not os.access(home.path / "cgroup.procs", os.W_OK):
        # Moving a worker between its own group and a session's needs write access to
        # the common ancestor's cgroup.procs (the delegation rule): this one.
        return f"{home.path}/cgroup.procs is not writable"
    base = home.child(BASE_NAME)
    group = base.child(runtime_id)
    for _attempt in range(2):  # another runtime may remove an empty base between two steps
        try:
            base.path.mkdir(exist_ok=True)
            group.path.mkdir()
            break
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"cannot create {group.path}: {exc.strerror}"
    else:
        return f"cannot create {group.path}"
    if not (group.path / "cgroup.kill").exists():
        remove_runtime_group(group)
        return "cgroup.kill is missing (Linux older than 5.14)"
    _mark_owner(group)
    sweep_abandoned(base, keep=runtime_id)
    try:
        record_runtime_group(runtime_dir, group)
    except OSError as exc:
        remove_runtime_group(group)
        return f"cannot record the group in {runtime_dir}: {exc.strerror}"
    return group


def _owner_tag() -> str:
    """This process as an owner: pid namespace, pid and start time (a reused pid differs)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "?"
    return f"{namespace} {os.getpid()} {proctree.start_time(os.getpid())}"


def _mark_owner(group: Group) -> None:
    """Name the runtime's owner on its group (a user xattr, Linux ≥ 5.7), so a later
    runtime can tell an abandoned group from a live one."""
    with contextlib.suppress(OSError):
        os.setxattr(group.path, OWNER_XATTR, _owner_tag().encode())


def _owner_state(group: Group) -> str:
    """Whether the runtime that owns ``group`` is "gone" (its recorded owner, in our pid
    namespace, has exited), "alive" (it runs, or lives in another pid namespace where we
    cannot tell) or "unknown" (no record)."""
    try:
        namespace, pid, start = os.getxattr(group.path, OWNER_XATTR).decode().split()
    except (OSError, ValueError):
        return "unknown"
    if namespace != _owner_tag().split()[0] or not pid.isdigit():
        return "alive"
    return "alive" if str(proctree.start_time(int(pid))) == start else "gone"


def sweep_abandoned(base: Group, keep: str) -> None:
    """Remove what runtimes that died without cleaning up (a SIGKILLed gateway) left in
    the shared base: a group whose owner is gone is killed and removed; one with no
    known owner is removed only if empty (a live runtime whose group was removed so
    makes it again for its next worker)."""
    try:
        names = [entry.name for entry in os.scandir(base.path) if entry.is_dir()]
    except OSError:
        return
    for name in names:
        if name == keep or not ID_RE.match(name):
            continue
        stale = base.child(name)
        state = _owner_state(stale)
        if state == "gone":
            log.info("removing the cgroup of an abandoned runtime: %s", stale.path)
            stale.kill_and_remove(2.0)
        elif state == "unknown":
            stale.remove()


def record_runtime_group(runtime_dir: Path, group: Group) -> None:
    """Name the runtime's group in its directory (again, if the directory was recreated):
    workers find it there, and so does the clean-up after a crash."""
    record = runtime_dir / RUNTIME_FILE
    tmp = record.with_suffix(".tmp")
    tmp.write_text(str(group.path))
    os.replace(tmp, record)


def remove_runtime_group(group: Group) -> bool:
    """Remove an (emptied) runtime group, and the shared base too if nothing else is in it."""
    gone = group.remove()
    if gone:
        with contextlib.suppress(OSError):
            group.path.parent.rmdir()  # fails while another runtime's group is there
    return gone


def kill_runtime(runtime_dir: Path, timeout: float = 5.0) -> bool:
    """Kill every process of the runtime's sessions and remove its groups; True when
    nothing is left (or the runtime had no group)."""
    group = runtime_group(runtime_dir)
    if group is None:
        return True
    group.kill_and_remove(timeout)
    return remove_runtime_group(group)
