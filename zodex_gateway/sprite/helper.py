"""Sprite's root helper (docs/sprite.md#privilege-separation): the only part of the service
that keeps root, and all it does is start, signal and finally kill the agent's processes.

``zodex sprite serve`` starts as root, forks this helper, and then drops to the service
account to face the network. The two talk over a ``SOCK_SEQPACKET`` socketpair, one JSON
object per packet (at most :data:`MAX_MESSAGE` bytes). What the service may ask:

- ``spawn`` a worker: the helper builds the command line itself — a fixed Python, a fixed
  runtime directory, spill directory and shell — from a workdir that must be an absolute
  real path of a directory, the worker id derived from it, an incarnation number and limits
  it re-validates; the worker runs as the agent account with the agent's clean environment.
  It is forked by the worker template when one is ready (:mod:`.agent_template`: started
  by the helper as the agent, every answer of it checked before root acts on it), else
  started as a new process. The reply carries the worker's stdout and stderr pipes
  (``SCM_RIGHTS``);
- ``kill_started`` (a worker it started and has not reaped), ``kill_record`` (a pid with its
  start time) and ``end_orphans`` (processes whose environment holds a session marker):
  SIGKILL, and only ever to a process of the agent account;
- ``stop``: kill every process of the agent account, answer, exit. A closed socket (the
  service died) does the same.

The helper reaps its children and reports each exit (``exited``, with the status as
``asyncio`` gives it: negative for a signal; a forked worker's once its pidfd says it
ended). It sends the template's stderr once per template (``template``, one descriptor)
and says when it is ready (``template_ready``). It ignores SIGTERM and SIGINT: stopping is the
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

from zodex_gateway.sprite.agent_processes import AgentAccount, kill_all, owned_by, start_as_agent
from zodex_gateway.sprite.agent_template import UNKNOWN_STATUS, AgentTemplate, ForkedWorker, TemplateFailed
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


@dataclass(frozen=True)
class HelperConfig:
    agent: AgentAccount
    worker_argv: list[str]  # the Python and its module; the rest is built per worker
    runtime_dir: Path
    spill_dir: Path
    shell: list[str]
    env: dict[str, str]
    worker_args: list[str] = field(default_factory=list)  # fixed ones, before those built per worker
    # The worker template's Python and module (docs/sprite.md#worker-template); None: none.
    template_argv: list[str] | None = None


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


def say(line: str) -> None:
    """A line of the helper's own on its stderr (the service's log)."""
    print(f"zodex sprite helper: {line}", file=sys.stderr, flush=True)


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
        self.forked: dict[int, ForkedWorker] = {}  # workers the template forked, by pid
        self.selector = selectors.DefaultSelector()
        self.stopping = False
        self.template = (
            None
            if config.template_argv is None
            else AgentTemplate(config.template_argv, config.agent, config.env, say, self.unwatch)
        )

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
        selector = self.selector
        selector.register(self.sock, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        code = 0
        try:
            self.start_template()
            while True:
                for key, _ in selector.select():
                    if key.fileobj == wake_r:
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake_r, 4096)
                        self.reap()
                    elif key.data is not None:
                        key.data()
                    elif not self.handle_one():
                        raise SystemExit
        except SystemExit:
            pass
        except BaseException as exc:  # never leave the agent's processes behind
            print(f"zodex sprite helper failed: {exc!r}", file=sys.stderr)
            code = 1
        self.stopping = True
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
            elif self.template is not None and pid == self.template.pid:
                self.template_exited(code)

    # ---- the worker template (docs/sprite.md#worker-template) ----------------------------

    def start_template(self) -> None:
        template = self.template
        if template is None or self.stopping or template.proc is not None:
            return
        stderr = template.start()
        if stderr is None or template.channel is None:
            return
        self.selector.register(template.channel, selectors.EVENT_READ, self.template_readable)
        try:  # its stderr goes to the service's log, within the workers' budget
            send(self.sock, {"op": "template", "pid": template.pid}, [stderr])
        finally:
            os.close(stderr)

    def unwatch(self, fileobj: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fileobj)

    def template_readable(self) -> None:
        assert self.template is not None
        was_ready = self.template.ready
        self.template.on_readable()
        if self.template.ready and not was_ready:
            with contextlib.suppress(OSError):
                send(self.sock, {"op": "template_ready", "pid": self.template.pid})
        self.take_exit_reports()

    def template_exited(self, code: int) -> None:
        assert self.template is not None
        self.template.exited(code, self.stopping)
        for worker in list(self.forked.values()):  # no status will come for these
            worker.orphaned = True
            self.report_forked(worker)
        self.start_template()  # as a crashed worker: again, until its restart policy gives up

    def take_exit_reports(self) -> None:
        assert self.template is not None
        reports, self.template.exit_reports = self.template.exit_reports, []
        for pid, status in reports:
            worker = self.forked.get(pid)
            if worker is not None:  # its end counts only once its pidfd says so
                worker.status = status
                self.report_forked(worker)

    def forked_ended(self, worker: ForkedWorker) -> None:
        worker.ended = True
        self.selector.unregister(worker.pidfd)
        self.report_forked(worker)

    def report_forked(self, worker: ForkedWorker) -> None:
        """A forked worker's exit goes to the service once its pidfd says it ended, with
        the status its template reported (unknown if the template died first)."""
        if not worker.ended or (worker.status is None and not worker.orphaned):
            return
        self.forked.pop(worker.pid, None)
        os.close(worker.pidfd)
        status = UNKNOWN_STATUS if worker.status is None else worker.status
        with contextlib.suppress(OSError):
            send(self.sock, {"op": "exited", "pid": worker.pid, "status": status})

    def fork_from_template(self, args: list[str], stdout_w: int, stderr_w: int) -> int | None:
        """A checked worker's pid from the template, or None: the caller starts one."""
        template = self.template
        if template is not None and template.proc is None:
            self.start_template()  # it could not start before: ready for the next one
        if template is None or not template.usable():
            return None
        try:
            pid, pidfd = template.fork(args, self.config.env, stdout_w, stderr_w)
        except TemplateFailed as exc:
            say(f"no worker from the template ({exc}); starting it as a new process")
            return None
        finally:
            self.take_exit_reports()
        worker = ForkedWorker(pid, pidfd)
        self.forked[worker.pid] = worker
        self.selector.register(pidfd, selectors.EVENT_READ, lambda: self.forked_ended(worker))
        return worker.pid

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
        args = [
            *config.worker_args,
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
            pid = self.fork_from_template(args, out_w, err_w)
        except BaseException:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            raise
        if pid is None:
            # New pipes: a template that failed may have handed the old ones to anyone.
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            pid = self.start_worker([*config.worker_argv, *args], out_r, out_w, err_r, err_w)
        else:
            os.close(out_w)
            os.close(err_w)
        try:
            send(self.sock, {"op": "spawned", "id": request, "pid": pid}, [out_r, err_r])
        finally:
            os.close(out_r)
            os.close(err_r)

    def start_worker(self, argv: list[str], out_r: int, out_w: int, err_r: int, err_w: int) -> int:
        """A worker started as a new process, the helper's child; its pid."""
        config = self.config
        try:
            proc = start_as_agent(argv, config.agent, config.env, out_w, err_w)
        except OSError as exc:
            for fd in (out_r, err_r):
                os.close(fd)
            raise ValueError(f"cannot start the worker: {_spawn_failure(exc)}") from None
        finally:
            os.close(out_w)
            os.close(err_w)
        self.children[proc.pid] = proc
        return proc.pid

    def kill_started(self, pid: object) -> None:
        if isinstance(pid, int) and pid in self.children:  # not reaped: still our child
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        elif isinstance(pid, int) and pid in self.forked:  # through the pidfd it was checked by
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.forked[pid].pidfd, signal.SIGKILL)

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
