"""Sprite's root helper (docs/sprite.md#privilege-separation): the only part of the service
that keeps root, and all it does is start, signal and finally kill the agent's processes.

``zodex sprite serve`` starts as root, forks this helper, and then drops to the service
account to face the network. The two talk over a ``SOCK_SEQPACKET`` socketpair, one JSON
object per packet (at most :data:`MAX_MESSAGE` bytes). What the service may ask:

- ``spawn`` a worker: the helper builds the command line itself — a fixed Python, a fixed
  runtime directory, spill directory and shell — from a workdir that must be an absolute
  real path of a directory, the worker id derived from it, an incarnation number and limits
  it re-validates; the worker runs as the agent account with the agent's clean environment.
  The reply carries the worker's stdout and stderr pipes (``SCM_RIGHTS``);
- ``kill_started`` (a worker it started and has not reaped), ``kill_record`` (a pid with its
  start time) and ``end_orphans`` (processes whose environment holds a session marker):
  SIGKILL, and only ever to a process of the agent account;
- ``stop``: kill every process of the agent account, answer, exit. A closed socket (the
  service died) does the same.

The helper reaps its children and reports each exit (``exited``, with the status as
``asyncio`` gives it: negative for a signal). It ignores SIGTERM and SIGINT: stopping is the
service's call, so the agent's processes are always killed last.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

from zodex_protocol.handles import MAX_INCARNATION, worker_id_for
from zodex_protocol.limits import Limits
from zodex_system import proctree
from zodex_system.no_new_privs import forbid_new_privileges

MAX_MESSAGE: Final = 64 * 1024
MAX_ERROR_CHARS: Final = 1000  # an error reply always fits in a message
# Far above any real limit, and exact as a float: a number beyond it is not a limit.
MAX_LIMIT: Final = 2**53
# ``ZODEX_SESSION_HANDLE=<worker id><incarnation>-``: nothing else is a marker.
_MARKER: Final = re.compile(rf"{proctree.SESSION_MARKER}=[0-9A-Za-z]{{1,64}}-")
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


@dataclass(frozen=True)
class HelperConfig:
    agent: AgentAccount
    worker_argv: list[str]  # the Python and its module; the rest is built per worker
    runtime_dir: Path
    spill_dir: Path
    shell: list[str]
    env: dict[str, str]


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors sent with it; None at end of stream (or an empty
    packet, which ``recv`` cannot tell from it). A packet that is not a JSON object of at
    most :data:`MAX_MESSAGE` bytes is ValueError, its descriptors closed."""
    data, fds, flags, _addr = socket.recv_fds(sock, MAX_MESSAGE + 1, 4)
    if not data and not fds:
        return None, []
    try:
        if len(data) > MAX_MESSAGE or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ValueError("message too large")
        try:
            message = json.loads(data)  # bad UTF-8 or JSON: ValueError too
        except RecursionError:
            raise ValueError("message nested too deeply") from None
        if not isinstance(message, dict):
            raise ValueError("message is not an object")
    except ValueError:
        for fd in fds:
            os.close(fd)
        raise
    return message, fds


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


def _spawn_failure(exc: OSError) -> str:
    """Why a worker could not be started, in words (never ``[Errno 11]``)."""
    if exc.errno == errno.EAGAIN:
        return "the agent's account cannot start another process (its process limit is reached)"
    return exc.strerror or str(exc)


def checked_limits(raw: object) -> Limits:
    """The limits of a spawn request: known names, each a whole number from 0 to
    :data:`MAX_LIMIT`; ValueError otherwise."""
    if not isinstance(raw, dict):
        raise ValueError("limits must be an object of whole numbers")
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
            raise ValueError(f"limit {name!r} must be a whole number from 0 to {MAX_LIMIT}")
    return Limits.from_dict(raw)


class Helper:
    def __init__(self, sock: socket.socket, config: HelperConfig) -> None:
        self.sock = sock
        self.config = config
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def run(self) -> NoReturn:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        try:
            # Before any worker: no command of the agent gains a privilege through a setuid
            # program, with the unit's NoNewPrivileges or without it.
            forbid_new_privileges()
        except OSError as exc:
            print(
                f"zodex sprite helper: cannot set no_new_privs ({exc.strerror}); not starting",
                file=sys.stderr,
            )
            os._exit(1)
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        code = 0
        try:
            while True:
                for key, _ in selector.select():
                    if key.fileobj == wake_r:
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake_r, 4096)
                        self.reap()
                    elif not self.handle_one():
                        raise SystemExit
        except SystemExit:
            pass
        except BaseException as exc:  # never leave the agent's processes behind
            print(f"zodex sprite helper failed: {exc!r}", file=sys.stderr)
            code = 1
        try:
            gone = kill_all(self.config.agent)
        except Exception as exc:  # reported, and the stop still answered
            print(f"zodex sprite helper: killing the agent's processes failed: {exc!r}", file=sys.stderr)
            gone = False
        if not gone:
            print("zodex sprite helper: processes of the agent account survived SIGKILL", file=sys.stderr)
            code = 1
        with contextlib.suppress(OSError):
            send(self.sock, {"op": "stopped"})
        os._exit(code)

    def reap(self) -> None:
        for pid, status in proctree.exited_children():
            proc = self.children.pop(pid, None)
            code = os.waitstatus_to_exitcode(status)
            if proc is not None:
                proc.returncode = code  # reaped here, not by Popen
                with contextlib.suppress(OSError):
                    send(self.sock, {"op": "exited", "pid": pid, "status": code})

    def handle_one(self) -> bool:
        """Serve one message; False when the service asked to stop or went away."""
        try:
            message, fds = receive(self.sock)
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            print(f"zodex sprite helper: refused a message: {exc}", file=sys.stderr)
            return True
        for fd in fds:
            os.close(fd)  # the service has nothing to hand to root
        if message is None:
            return False
        op = message.get("op")
        if op == "stop":
            return False
        try:
            if op == "spawn":
                self.spawn(message)
            elif op == "kill_started":
                self.kill_started(message.get("pid"))
            elif op == "kill_record":
                self.kill_record(message.get("pid"), message.get("start"))
            elif op == "end_orphans":
                self.end_orphans(message.get("marker"))
            else:
                raise ValueError(f"unknown request {op!r}")
        except ValueError as exc:
            request = message.get("id")
            if isinstance(request, bool) or not isinstance(request, int):
                request = None  # not one of the service's request numbers
            send(self.sock, {"op": "error", "id": request, "error": str(exc)[:MAX_ERROR_CHARS]})
        return True

    def spawn(self, message: dict[str, Any]) -> None:
        request = message.get("id")
        workdir = message.get("workdir")
        incarnation = message.get("incarnation")
        if not isinstance(workdir, str) or not workdir.startswith("/") or "\0" in workdir:
            raise ValueError("workdir must be an absolute path")
        if os.path.realpath(workdir) != workdir or not os.path.isdir(workdir):
            shown = workdir if len(workdir) <= 200 else f"{workdir[:200]}…"
            raise ValueError(f"workdir {shown!r} is not the real path of a directory")
        if isinstance(incarnation, bool) or not isinstance(incarnation, int):
            raise ValueError("incarnation must be a number")
        if not 1 <= incarnation <= MAX_INCARNATION:
            raise ValueError("incarnation out of range")
        if message.get("worker_id") != worker_id_for(workdir):
            raise ValueError("worker id does not match the workdir")
        limits = checked_limits(message.get("limits", {}))
        config = self.config
        argv = [
            *config.worker_argv,
            "--runtime-dir", str(config.runtime_dir),
            "--workdir", workdir,
            "--worker-id", worker_id_for(workdir),
            "--incarnation", str(incarnation),
            "--spill-dir", str(config.spill_dir),
            "--shell", json.dumps(config.shell),
            "--limits", json.dumps(limits.to_dict()),
            # Tombstones readable by the agent's own group, which the service holds: the
            # agent's results, nothing of the service's (docs/sprite.md#privilege-separation).
            "--group-readable-exits",
        ]  # fmt: skip
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                cwd="/",
                env=config.env,
                user=config.agent.uid,
                group=config.agent.gid,
                extra_groups=[],
                umask=WORKER_UMASK,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            for fd in (out_r, err_r):
                os.close(fd)
            raise ValueError(f"cannot start the worker: {_spawn_failure(exc)}") from None
        finally:
            os.close(out_w)
            os.close(err_w)
        self.children[proc.pid] = proc
        try:
            send(self.sock, {"op": "spawned", "id": request, "pid": proc.pid}, [out_r, err_r])
        finally:
            os.close(out_r)
            os.close(err_r)

    def kill_started(self, pid: object) -> None:
        if isinstance(pid, int) and pid in self.children:  # not reaped: still our child
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def kill_record(self, pid: object, start: object) -> None:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            return
        info = proctree.read_proc(pid)
        if info is None or info.start != start or not owned_by(pid, self.config.agent.uid):
            return  # not the process named, or not the agent's: never signalled
        proctree.signal_process(info, signal.SIGKILL)

    def end_orphans(self, marker: object) -> None:
        if not isinstance(marker, str) or not _MARKER.fullmatch(marker):
            raise ValueError("not a session marker")
        for orphan in proctree.processes_with_env(marker):
            if owned_by(orphan.pid, self.config.agent.uid):
                proctree.signal_process(orphan, signal.SIGKILL)
