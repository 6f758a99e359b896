"""Each session in its own cgroup v2 group, where the machine lets us
(docs/sessions.md#process-groups-and-cgroups).

A group holds every process a command starts, however it re-parents, calls ``setsid`` or
clears its environment: the kernel lists them (``cgroup.procs``) and kills them all in one
write (``cgroup.kill``, Linux ≥ 5.14). Layout, under the cgroup2 mount (found in
``/proc/mounts``, never assumed)::

    <group of the gateway that created the runtime>/zodex/<runtime id>/<worker id>-<incarnation>/s<n>

The owning gateway creates the runtime's group and names it in ``<runtime dir>/cgroup``
(:mod:`zodex_system.runtime_cgroups`); each worker makes its own inside, and one per
session. A dead worker's group is killed by the gateway; the runtime's by its shutdown,
``zodex local stop`` or the clean-up after a crashed runtime. Groups are removed once empty. Without a writable cgroup2 hierarchy
(not root, no delegated user slice) or with ``session.cgroups = off``, sessions fall back to
the environment-marker sweep of :mod:`zodex_system.proctree`.

Placement is race-free without a fork of our own: the worker moves itself into the new
session's group, spawns (``posix_spawn`` is vfork + exec, so the child is born inside the
group before it runs one instruction of the command) and moves itself back. Both moves
are writes to ``cgroup.procs`` on the event-loop thread, the only thread that spawns.
(``clone3(CLONE_INTO_CGROUP)`` cannot be used from Python without a fork of the whole
interpreter, and glibc's ``posix_spawnattr_setcgroup_np`` needs glibc 2.41.)

Only the two moves stay on a command's path. The next session's group is made, and its
``cgroup.procs`` opened, ahead of time (:meth:`SessionGroups.prepare`, called while the
previous command runs), and the worker's own ``cgroup.procs`` stays open, so a spawn costs
two ``write`` calls. A move takes every thread of the process (about 11 µs each here), so
the worker keeps few (docs/benchmarks.md#where-the-time-goes).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("zodex.cgroups")

BASE_NAME = "zodex"
RUNTIME_FILE = "cgroup"  # in the runtime directory: the runtime group's absolute path
ENV_SWITCH = "ZODEX_CGROUPS"  # "off" forces the marker sweep (tests; machines that object)
ID_RE = re.compile(r"^[0-9a-z-]{1,64}$")  # runtime ids, worker ids, handles
# Compiled on import: a worker forked from the template then finds it compiled.
MOUNT_ESCAPE_RE = re.compile(r"\\([0-7]{3})")
T = TypeVar("T")


def _unescape_mount(field: str) -> str:
    """``/proc/mounts`` writes space, tab, newline and backslash as octal escapes."""
    return MOUNT_ESCAPE_RE.sub(lambda m: chr(int(m.group(1), 8)), field)


def cgroup2_mount() -> Path | None:
    """Where the unified (v2) hierarchy is mounted: /sys/fs/cgroup on most machines,
    /sys/fs/cgroup/unified on hybrid ones; None without one."""
    try:
        with open("/proc/self/mounts") as f:
            return parse_mounts(f.read())
    except OSError:
        return None


def parse_mounts(text: str) -> Path | None:
    """The first cgroup2 mount point in ``/proc/mounts`` text."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(_unescape_mount(fields[1]))
    return None


def own_group(pid: int | str = "self") -> str | None:
    """A process's v2 group ("/" for the root group), from its ``0::/path`` line."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::/"):
            return line[3:]
    return None


def wanted(switch: str | None = None) -> bool:
    """Whether cgroups may be used: not when ``ZODEX_CGROUPS=off`` (or the given switch is)."""
    value = switch if switch is not None else os.environ.get(ENV_SWITCH, "auto")
    return value.strip().lower() not in ("off", "0", "false", "no")


@dataclass(frozen=True)
class Group:
    """One cgroup directory: list, signal, kill, wait for and remove its processes.

    A group that is gone reads as empty: a session's group may be removed once its last
    process has exited."""

    path: Path
    relative: str  # as /proc/<pid>/cgroup names it, e.g. "/zodex/ab12/wk3-1/wk3-1-x"

    def child(self, name: str) -> Group:
        return Group(self.path / name, f"{self.relative.rstrip('/')}/{name}")

    def _subtree(self) -> list[Path]:
        """This directory and every group below it, deepest first."""
        found: list[Path] = []
        for root, _dirs, _files in os.walk(self.path, topdown=False):
            found.append(Path(root))
        return found

    def procs(self) -> list[int]:
        """Pids of the live processes in this group and its descendants (zombies are not
        listed by the kernel)."""
        pids: list[int] = []
        for directory in self._subtree():
            with contextlib.suppress(OSError):
                pids += [int(p) for p in (directory / "cgroup.procs").read_text().split()]
        return pids

    def populated(self) -> bool:
        try:
            fd = os.open(os.path.join(self.path, "cgroup.events"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            return b"populated 1" in os.read(fd, 256)
        except OSError:
            return False
        finally:
            os.close(fd)

    def holds(self, pid: int | str) -> bool:
        group = own_group(pid)
        prefix = self.relative.rstrip("/") + "/"
        return group is not None and (group == self.relative or group.startswith(prefix))

    def signal(self, sig: int) -> int:
        """Send ``sig`` to every process in the group; returns how many got it. A pidfd pins
        each process, and membership is checked through it, so a pid reused by a stranger
        between listing and signalling is never hit."""
        sent = 0
        for pid in self.procs():
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if self.holds(pid):
                    signal.pidfd_send_signal(fd, sig)
                    sent += 1
            except OSError:
                pass
            finally:
                os.close(fd)
        return sent

    def kill(self) -> bool:
        """SIGKILL everything in the group and below, in one write. Refused (False) while
        this very process is inside (a worker mid-spawn): it would kill itself."""
        if self.holds("self"):
            log.error("not killing cgroup %s: this process is inside it", self.path)
            return False
        try:
            (self.path / "cgroup.kill").write_text("1")
            return True
        except OSError:
            return False

    def wait_empty(self, timeout: float) -> bool:
        """Wait for ``populated 0``: the kernel signals changes of ``cgroup.events`` to
        poll() as POLLPRI, so this is an event, not a timer."""
        deadline = time.monotonic() + timeout
        try:
            fd = os.open(self.path / "cgroup.events", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return True  # gone
        try:
            poller = select.poll()
            poller.register(fd, select.POLLPRI)
            while True:
                os.lseek(fd, 0, os.SEEK_SET)
                if b"populated 0" in os.read(fd, 256):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                poller.poll(min(remaining, 1.0) * 1000)
        except OSError:
            return not self.populated()
        finally:
            os.close(fd)

    def remove(self) -> bool:
        """Remove the group and its descendants if they are empty; True if it is gone."""
        try:
            os.rmdir(self.path)  # a session's group almost never has groups below it
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                log.warning("could not remove cgroup %s: %s", self.path, exc.strerror)
                return False
        for directory in self._subtree():
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    log.warning("could not remove cgroup %s: %s", directory, exc.strerror)
                return False
        return True

    def kill_and_remove(self, timeout: float = 5.0) -> bool:
        """What a dead owner's group gets: killed, waited for, removed. True if gone."""
        if not self.path.is_dir():
            return True
        self.kill()
        self.wait_empty(timeout)
        return self.remove()


def _group_at(path: Path) -> Group | None:
    """The group at an absolute path inside the cgroup2 mount, or None."""
    mount = cgroup2_mount()
    if mount is None or not path.is_absolute():
        return None
    try:
        relative = path.relative_to(mount)
    except ValueError:
        return None
    if ".." in relative.parts:
        return None
    return Group(path, "/" + str(relative) if str(relative) != "." else "/")


# ---- where a runtime's groups are (gateway and worker) ------------------------------


def runtime_group(runtime_dir: Path) -> Group | None:
    """The runtime's group as recorded in its directory, if it is a real zodex runtime group
    (``…/zodex/<runtime id>`` inside the cgroup2 mount): a corrupt record never names
    another group to kill."""
    try:
        text = (runtime_dir / RUNTIME_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    path = Path(text)
    if path.name != runtime_dir.name or path.parent.name != BASE_NAME or not ID_RE.match(path.name):
        return None
    group = _group_at(path)
    return group if group is not None and path.is_dir() else None


def worker_group_of(runtime_dir: Path, worker_id: str, incarnation: int) -> Group | None:
    group = runtime_group(runtime_dir)
    return None if group is None else group.child(f"{worker_id}-{incarnation}")


# ---- a worker's session groups -------------------------------------------------------


class SessionGroups:
    """A worker's groups: ``<runtime group>/<worker id>-<incarnation>/s<n>``, one per
    session. Numbered, not named by handle: ``/proc/<pid>/cgroup`` is world-readable."""

    def __init__(self, worker: Group, home: Group) -> None:
        self.worker = worker
        self.home = home  # where this process lives between spawns
        self.enabled = True
        self._made = 0
        self._home_procs: int | None = None  # home's cgroup.procs, open while the worker lives
        self._spare: tuple[Group, int] | None = None  # the next session's group and its cgroup.procs

    @classmethod
    def open(cls, runtime_dir: Path, worker_id: str, incarnation: int) -> SessionGroups | None:
        """The worker's groups, or None when its runtime has none (cgroups off or not
        available) or it cannot make its own."""
        worker = worker_group_of(runtime_dir, worker_id, incarnation)
        mount = cgroup2_mount()
        own = own_group()
        if worker is None or mount is None or own is None:
            return None
        try:
            # parents: a live runtime's group, removed while empty by another runtime's
            # sweep (when xattrs are unsupported), is simply made again.
            worker.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("cannot create cgroup %s (%s); using the environment-marker sweep", worker.path, exc)
            return None
        groups = cls(worker, Group(mount / own.lstrip("/"), own))
        groups.prepare()
        return groups

    def prepare(self) -> None:
        """Make the next session's group and open its ``cgroup.procs`` now, off a command's
        path (the worker calls this while a command runs). A failure is left for the next
        spawn, which meets it again and falls back as before."""
        if self.enabled and self._spare is None:
            with contextlib.suppress(OSError):
                self._spare = self._make()

    def _make(self) -> tuple[Group, int]:
        self._made += 1
        group = self.worker.child(f"s{self._made}")
        os.mkdir(group.path)
        try:
            return group, os.open(os.path.join(group.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            group.remove()
            raise

    def spawn_in(self, spawn: Callable[[], T]) -> tuple[T, Group | None]:
        """Run ``spawn`` with this process inside a fresh session group, so that what it
        starts is born there; returns its result and the group (None when cgroups could
        not be used: the session then relies on the marker sweep)."""
        if not self.enabled:
            return spawn(), None
        spare, self._spare = self._spare, None
        try:
            if spare is None:
                spare = self._make()
            if self._home_procs is None:  # the way back is open before we leave
                self._home_procs = os.open(self.home.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            os.write(spare[1], str(os.getpid()).encode())
        except OSError as exc:
            self.enabled = False
            if spare is not None:
                os.close(spare[1])
                spare[0].remove()
            log.warning(
                "cannot use cgroup %s (%s); using the environment-marker sweep", self.worker.path, exc
            )
            return spawn(), None
        group, procs = spare
        os.close(procs)
        try:
            result = spawn()
        except BaseException:
            self._leave()
            group.remove()
            raise
        self._leave()
        return result, group

    def _leave(self) -> None:
        try:
            assert self._home_procs is not None
            os.write(self._home_procs, str(os.getpid()).encode())
        except OSError as exc:
            # Never seen in practice; Group.kill refuses a group holding this process.
            self.enabled = False
            log.error("cannot move back to cgroup %s: %s", self.home.path, exc)

    def close(self, timeout: float = 5.0) -> None:
        """At exit: kill whatever is left in this worker's groups and remove them."""
        for fd in (self._home_procs, self._spare[1] if self._spare is not None else None):
            if fd is not None:
                os.close(fd)
        self._home_procs = self._spare = None
        if not self.worker.holds("self"):
            self.worker.kill_and_remove(timeout)
