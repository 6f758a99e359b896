"""The agent account's processes as the root helper sees them: which are the agent's, and
killing all of them (docs/sprite.md#privilege-separation). Root only; every signal sent
from here reaches a process of the agent account and no other."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from zodex_system import proctree

KILL_ROUNDS: Final = 20
KILL_WAIT_S: Final = 5.0
# Group write for the worker's sockets: the service reaches them through the agent's own
# group (a user-private group), never the other way round.
WORKER_UMASK: Final = 0o002


@dataclass(frozen=True)
class AgentAccount:
    name: str
    uid: int
    gid: int
    home: Path


def start_as_agent(
    argv: list[str],
    agent: AgentAccount,
    env: dict[str, str],
    stdout: int,
    stderr: int,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """A process of the agent account as every worker and the worker template start: the
    agent's uid and own group and no other, umask :data:`WORKER_UMASK`, ``/``, ``env``, a
    session of its own, stdin ``/dev/null``, no descriptor but ``pass_fds``. OSError if it
    cannot be started."""
    return subprocess.Popen(
        argv,
        pass_fds=pass_fds,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        cwd="/",
        env=env,
        user=agent.uid,
        group=agent.gid,
        extra_groups=[],
        umask=WORKER_UMASK,
        start_new_session=True,
        close_fds=True,
    )


def agent_uids(pid: int) -> tuple[int, int] | None:
    """(real, effective) uid of ``pid`` from ``/proc/<pid>/status``; None when gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"Uid:"):
                    real, effective = line.split()[1:3]
                    return int(real), int(effective)
    except (OSError, ValueError):
        return None
    return None


def owned_by(pid: int, uid: int) -> bool:
    uids = agent_uids(pid)
    return uids is not None and uid in uids


def processes_of(uid: int) -> list[int]:
    """Every live (not zombie) process whose real or effective uid is ``uid``."""
    found = []
    for pid, info in proctree.snapshot().items():
        if not info.zombie and pid != os.getpid() and owned_by(pid, uid):
            found.append(pid)
    return found


def kill_all(account: AgentAccount) -> bool:
    """SIGKILL every process of the account and wait until they are gone; True if none is
    left. ``kill(-1)`` from a child that has become the account reaches them all in one
    pass of the kernel (a fork racing it is either signalled or not yet born); when no
    child can be forked (the agent has used up the pids it shares with the helper: a pids
    cgroup, ``pid_max``), each process is stopped and killed from here instead. Repeated
    until a scan of ``/proc`` finds none."""
    for _ in range(KILL_ROUNDS):
        left = processes_of(account.uid)
        if not left:
            return True
        if not _kill_as_account(account):
            _kill_each(account.uid, left)
        _wait_gone(left)
    return not processes_of(account.uid)


def _kill_as_account(account: AgentAccount) -> bool:
    """``kill(-1)`` as the account, from a child; False when no child can be forked."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:  # pragma: no cover - the child only signals and exits
        try:
            os.setgroups([])
            os.setresgid(account.gid, account.gid, account.gid)
            os.setresuid(account.uid, account.uid, account.uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return True


def _kill_each(uid: int, pids: list[int]) -> None:
    """SIGSTOP, then SIGKILL, each of ``pids`` from the helper itself, needing no fork: a
    stopped process forks no more while the rest are reached. Each is signalled through a
    pidfd opened before its owner is checked again, so a pid reused meanwhile by a process
    of another account is never touched."""
    pidfds = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # gone already
        if owned_by(pid, uid):
            pidfds.append(fd)
        else:
            os.close(fd)
    try:
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for fd in pidfds:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, sig)
    finally:
        for fd in pidfds:
            os.close(fd)


def _wait_gone(pids: list[int]) -> None:
    """Wait (bounded) until each pid has exited, through pidfds: no polling."""
    poller = selectors.DefaultSelector()
    fds = []
    try:
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            fds.append(fd)
            poller.register(fd, selectors.EVENT_READ)
        pending = len(fds)
        while pending:
            ready = poller.select(KILL_WAIT_S)
            if not ready:
                return
            for key, _ in ready:
                poller.unregister(key.fileobj)
                pending -= 1
    finally:
        for fd in fds:
            os.close(fd)
        poller.close()
