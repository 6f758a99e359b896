"""Finding and signalling the processes of a session, never a stranger who reused a pid.

Linux reads ``/proc``. A process belongs to a session when it is in the leader's process
group or session, descends from such a process, or carries the session's marker in its
initial environment (``ZODEX_SESSION_HANDLE``) — the last rule finds descendants that
called ``setsid`` and were orphaned, which the worker (a child subreaper) then parents.
Every pid is paired with its start time; a signal goes out only if the pid still has it.
Elsewhere (macOS) only the leader's process group is reachable.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass

PROC = "/proc"
SESSION_MARKER = "ZODEX_SESSION_HANDLE"
HAVE_PROC = sys.platform.startswith("linux") and os.path.isdir(PROC)


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int  # clock ticks since boot: (pid, start) names a process uniquely
    zombie: bool


def read_proc(pid: int) -> ProcInfo | None:
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rindex(b")") + 2 :].split()
    return ProcInfo(
        pid=pid,
        ppid=int(rest[1]),
        pgid=int(rest[2]),
        sid=int(rest[3]),
        start=int(rest[19]),
        zombie=rest[0] in (b"Z", b"X"),
    )


def start_time(pid: int) -> int | None:
    info = read_proc(pid)
    return None if info is None else info.start


def snapshot() -> dict[int, ProcInfo]:
    table: dict[int, ProcInfo] = {}
    if not HAVE_PROC:
        return table
    for name in os.listdir(PROC):
        if name.isdigit():
            info = read_proc(int(name))
            if info is not None:
                table[info.pid] = info
    return table


def _environ(pid: int) -> list[bytes]:
    """A process's initial environment entries (empty if it is gone or not ours to read)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _has_marker(pid: int, marker: bytes) -> bool:
    return marker in _environ(pid)


def is_alive(pid: int, start: int | None) -> bool:
    """Whether ``pid`` still names the process that started at ``start`` (zombies are gone).
    Without /proc, only whether some process has that pid."""
    if not HAVE_PROC:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
    info = read_proc(pid)
    return info is not None and not info.zombie and info.start == start


def descendants(table: dict[int, ProcInfo], roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        for child in children.get(pid, ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def session_members(
    leader_pid: int, leader_start: int | None, handle: str, *, owner_pid: int | None = None
) -> list[ProcInfo]:
    """Live (non-zombie) processes of a session, the leader included if still running."""
    table = snapshot()
    floor = leader_start or 0
    members = {
        p.pid
        for p in table.values()
        if (p.pgid == leader_pid or p.sid == leader_pid or p.pid == leader_pid) and p.start >= floor
    }
    members |= descendants(table, members)
    # Orphans that left the group: only the worker's own descendants can carry our marker.
    marker = f"{SESSION_MARKER}={handle}".encode()
    scope = descendants(table, {owner_pid or os.getpid()}) - members
    members |= {pid for pid in scope if table[pid].start >= floor and _has_marker(pid, marker)}
    members |= descendants(table, members)
    return [table[pid] for pid in sorted(members) if not table[pid].zombie]


def worker_children() -> set[int] | None:
    """Pids of this process's children (orphans land here: the worker is a subreaper),
    or None when the kernel does not say."""
    try:
        tids = os.listdir(f"{PROC}/self/task")
        found: set[int] = set()
        for tid in tids:
            with open(f"{PROC}/self/task/{tid}/children") as f:
                found.update(int(p) for p in f.read().split())
        return found
    except OSError:
        return None


def exited_children() -> Iterator[tuple[int, int]]:
    """Each child that has exited and is not reaped yet, reaped now: ``(pid, wait status)``,
    never blocking. For a process's one reaper only: ``waitpid(-1)`` takes every child's
    status, whoever else waits for it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def may_have_members(leader_pid: int, other_leaders: set[int]) -> bool:
    """A cheap, conservative test run at every command's end: False only when the group
    is empty and no unexplained child (an orphan) has come to the worker."""
    try:
        os.killpg(leader_pid, 0)
        return True
    except ProcessLookupError:
        pass
    except PermissionError:
        return True
    children = worker_children()
    return children is None or bool(children - other_leaders)


def processes_with_env(entry_prefix: str) -> list[ProcInfo]:
    """Every live process (but this one) with an environment entry starting with
    ``entry_prefix`` — e.g. the commands of a dead worker incarnation or runtime, which
    inherited its marker."""
    prefix = entry_prefix.encode()
    return [
        info
        for info in snapshot().values()
        if not info.zombie
        and info.pid != os.getpid()
        and any(item.startswith(prefix) for item in _environ(info.pid))
    ]


def signal_process(info: ProcInfo, sig: int) -> bool:
    """Signal one process only if it is still the one we saw. True if delivered."""
    pidfd_open = getattr(os, "pidfd_open", None)
    send = getattr(signal, "pidfd_send_signal", None)
    if pidfd_open is not None and send is not None:
        # A pidfd pins the process: checking the start time and signalling through the
        # same fd closes the window in which the pid could be reused.
        try:
            fd = pidfd_open(info.pid)
        except OSError:
            return False
        try:
            if start_time(info.pid) != info.start:
                return False
            send(fd, sig)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
    if HAVE_PROC and start_time(info.pid) != info.start:
        return False
    try:
        os.kill(info.pid, sig)
        return True
    except OSError:
        return False


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, sig)


def live_count(infos: list[ProcInfo]) -> int:
    """How many of these processes are still running (same pid, same start, not a zombie)."""
    count = 0
    for info in infos:
        now = read_proc(info.pid)
        if now is not None and now.start == info.start and not now.zombie:
            count += 1
    return count


def members_of(pids: list[int]) -> list[ProcInfo]:
    """The live processes among ``pids`` (e.g. a session cgroup's ``cgroup.procs``)."""
    found = (read_proc(pid) for pid in sorted(set(pids)))
    return [info for info in found if info is not None and not info.zombie]
