"""The worker template of Sprite and fleet hosts, from the root helper's side
(docs/sprite.md#worker-template).

The helper starts ``python -m zodex_worker.template`` as the agent account, under every
rule it applies to a worker (the agent's uid and own group and no other group, umask,
working directory ``/``, the agent's clean environment, a session of its own,
``no_new_privs`` inherited), over a ``SOCK_SEQPACKET`` socket pair only the helper and the
template hold. It asks the template to fork a worker with the command line it built
itself, for a workdir it checked, and gets back a pid and a pidfd.

The template belongs to the agent, who can ptrace it or replace its code: everything it
sends is untrusted. Root acts only on a process it has checked through the pidfd it was
sent: a pidfd (not some other descriptor) whose process has the pid claimed, is the
template's child, runs as the agent (every uid and gid, no supplementary group), has
``no_new_privs`` and has not exited — the pidfd checked alive after ``/proc/<pid>`` was
read, so the pid named that process all along. Any other answer, a malformed packet, or no
answer in time is the template's failure: it is killed (it is the helper's own child),
counted by its restart policy, and the worker started the usual way. A worker that has
already exited, or a fork the template says failed, only starts the worker the usual way.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from zodex_gateway.sprite.agent_processes import AgentAccount, start_as_agent
from zodex_gateway.workers.restart_policy import RestartPolicy

FORK_ANSWER_S: Final = 5.0
MAX_PACKET: Final = 4096  # the template's messages are a few dozen bytes
# The status of a worker whose template died before saying how it ended.
UNKNOWN_STATUS: Final = 255


class TemplateFailed(Exception):
    """One line: what the template did wrong, or why it gave no worker."""


class ForkRefused(TemplateFailed):
    """The template said it could not fork (``{"error": ...}``): no misdeed, nothing to
    stop; the worker is started the usual way."""


class WorkerGone(ForkRefused):
    """The process it named has already exited: nothing to act on, and no proof of a lie (a
    worker may end before it is checked); the worker is started the usual way."""


@dataclass
class ForkedWorker:
    """A worker the template forked, checked; the helper holds its pidfd until it ends."""

    pid: int
    pidfd: int
    ended: bool = False  # its pidfd said so
    status: int | None = None  # what the template reported
    orphaned: bool = False  # its template is gone: no status will come


def pidfd_target(fd: int) -> int | None:
    """The pid of the process ``fd`` refers to if it is a pidfd (-1 once it has exited),
    else None."""
    try:
        if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:[pidfd]":
            return None
        with open(f"/proc/self/fdinfo/{fd}", "rb") as info:
            for line in info:
                if line.startswith(b"Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def status_fields(pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` as name → value; empty when the process is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            text = status.read().decode("utf-8", "replace")
    except OSError:
        return {}
    return {name: value.strip() for name, _, value in (line.partition(":") for line in text.splitlines())}


def check_forked(message: dict[str, Any], fds: list[int], template_pid: int, agent: AgentAccount) -> int:
    """The pid of the worker the template says it forked, once checked (``fds`` hold its
    pidfd, closed by the caller); TemplateFailed otherwise."""
    pid = message.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise TemplateFailed(f"answered {str(message)[:200]} instead of a worker's pid")
    if len(fds) != 1:
        raise TemplateFailed(f"sent {len(fds)} descriptors with pid {pid}, not its pidfd")
    target = pidfd_target(fds[0])
    if target is None:
        raise TemplateFailed(f"sent a descriptor that is not a pidfd with pid {pid}")
    if target == -1:
        raise WorkerGone(f"sent pid {pid}, which has already exited")
    if target != pid:
        raise TemplateFailed(f"sent the pidfd of process {target} as pid {pid}")
    fields = status_fields(pid)
    ids = (str(agent.uid),) * 4, (str(agent.gid),) * 4
    if not fields or fields.get("State", "Z").startswith(("Z", "X")):
        raise WorkerGone(f"sent pid {pid}, which has already exited")
    if fields.get("PPid") != str(template_pid):
        raise TemplateFailed(f"sent pid {pid}, which is not its child")
    if (tuple(fields.get("Uid", "").split()), tuple(fields.get("Gid", "").split())) != ids:
        raise TemplateFailed(f"sent pid {pid}, which does not run as {agent.name}")
    if fields.get("Groups", "") != "" or fields.get("NoNewPrivs") != "1":
        raise TemplateFailed(f"sent pid {pid}, which has other groups or privileges than a worker")
    try:  # alive now, so /proc/<pid> above was this pidfd's process, not a reused pid
        signal.pidfd_send_signal(fds[0], 0)
    except ProcessLookupError:
        raise WorkerGone(f"sent pid {pid}, which has already exited") from None
    return pid


class AgentTemplate:
    """One template process as the agent, and its channel. The helper serves one message
    at a time, so a fork's answer is awaited here, bounded; exit reports on the way are
    kept."""

    def __init__(
        self,
        argv: list[str],
        agent: AgentAccount,
        env: dict[str, str],
        log: Callable[[str], None],
        unwatch: Callable[[socket.socket], None],
    ) -> None:
        self.argv = argv
        self.agent = agent
        self.env = env
        self.log = log
        self.unwatch = unwatch  # the helper stops watching the channel before it is closed
        self.policy = RestartPolicy()
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: socket.socket | None = None
        self.ready = False
        self.discarded = False  # killed by the helper: its exit was counted already
        self._said_unavailable = False
        self.exit_reports: list[tuple[int, int]] = []  # (pid, status), for the helper

    def start(self) -> int | None:
        """Start it unless its restart policy gave up; the read end of its stderr, which
        the caller hands on (the service logs it), or None."""
        if self.policy.gave_up():
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            self.proc = start_as_agent(
                [*self.argv, "--channel", str(theirs.fileno())],
                self.agent,
                self.env,
                subprocess.DEVNULL,
                err_w,
                pass_fds=[theirs.fileno()],
            )
        except OSError as exc:
            ours.close()
            os.close(err_r)
            self.policy.record_crash()
            self.log(f"the worker template could not be started ({exc.strerror or exc})")
            return None
        finally:
            theirs.close()
            os.close(err_w)
        ours.setblocking(False)
        self.channel, self.ready, self.discarded = ours, False, False
        return err_r

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def usable(self) -> bool:
        """Running and ready; says once why not when it has given up."""
        if self.channel is not None and self.ready:
            self._said_unavailable = False
            return True
        if self.proc is None and self.policy.gave_up() and not self._said_unavailable:
            self.log(
                f"worker template unavailable (it failed {self.policy.recent_crashes()} times in "
                f"{self.policy.window_s:.0f} s); starting workers as new processes"
            )
            self._said_unavailable = True
        return False

    def on_readable(self) -> None:
        """Whatever it sent unasked: ``ready``, exit reports; anything else discards it."""
        try:
            while self.channel is not None:
                self._take(self._receive(block=False))
        except BlockingIOError:
            pass
        except TemplateFailed as exc:
            self.discard(str(exc))

    def fork(self, args: list[str], env: dict[str, str], stdout_w: int, stderr_w: int) -> tuple[int, int]:
        """The pid and pidfd of a checked worker forked with ``args`` (the worker's, after its
        program) and ``env``; TemplateFailed, with the template discarded, otherwise."""
        assert self.channel is not None and self.proc is not None
        payload = json.dumps({"argv": args, "env": env}).encode()
        try:
            socket.send_fds(self.channel, [payload], [stdout_w, stderr_w])
            deadline = time.monotonic() + FORK_ANSWER_S
            while True:
                message, fds = self._receive(block=True, deadline=deadline)
                if "exited" in message:
                    self._take((message, fds))
                    continue
                if set(message) == {"error"} and not fds:
                    raise ForkRefused(f"it could not fork: {str(message['error'])[:200]}")
                try:
                    pid = check_forked(message, fds, self.proc.pid, self.agent)
                except BaseException:
                    for fd in fds:
                        os.close(fd)
                    raise
                return pid, fds[0]
        except OSError as exc:
            self.discard(f"its channel failed ({exc.strerror or exc})")
            raise TemplateFailed("its channel failed") from None
        except ForkRefused:
            raise
        except TemplateFailed as exc:
            self.discard(str(exc))
            raise

    def _receive(self, *, block: bool, deadline: float = 0.0) -> tuple[dict[str, Any], list[int]]:
        assert self.channel is not None
        if block:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.channel], [], [], left)[0]:
                raise TemplateFailed(f"did not answer within {FORK_ANSWER_S:g} s")
        data, fds, flags, _addr = socket.recv_fds(self.channel, MAX_PACKET, 4)  # more than one: refused
        if not data and not fds:
            raise TemplateFailed("closed its channel")
        try:
            message = json.loads(data)
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or not isinstance(message, dict):
                raise ValueError
        except (ValueError, RecursionError):
            for fd in fds:
                os.close(fd)
            raise TemplateFailed(f"sent a malformed packet ({len(data)} bytes)") from None
        return message, fds

    def _take(self, received: tuple[dict[str, Any], list[int]]) -> None:
        message, fds = received
        for fd in fds:
            os.close(fd)  # only a fork's answer carries one
        if "ready" in message and not self.ready:
            if message["ready"] != self.pid or fds:
                raise TemplateFailed(f"said it was ready as {str(message)[:200]}")
            self.ready = True
        elif "exited" in message:
            pid, status = message.get("exited"), message.get("status")
            if isinstance(pid, int) and isinstance(status, int) and not isinstance(status, bool):
                self.exit_reports.append((pid, status))
        else:
            raise TemplateFailed(f"sent {str(message)[:200]} unasked")

    def discard(self, reason: str) -> None:
        """Stop using it and kill it (it is the helper's child, not reaped yet: its pid is
        still its own); counted by its restart policy."""
        if self.channel is None or self.proc is None:
            return
        self.log(f"the worker template (pid {self.proc.pid}) {reason}; it is stopped")
        self.close()
        self.discarded = True
        self.policy.record_crash()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.channel is not None:
            self.unwatch(self.channel)
            self.channel.close()
            self.channel = None
        self.ready = False

    def exited(self, status: int, stopping: bool) -> None:
        """The helper reaped it: a crash unless it ended as asked (0) or was discarded."""
        self.close()
        if status != 0 and not self.discarded and not stopping:
            self.policy.record_crash()
            self.log(f"the worker template (pid {self.pid}) exited (status {status})")
        self.proc = None
