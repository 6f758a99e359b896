"""Local's launcher: workers forked from a pre-imported template (docs/architecture.md#worker-template).

The template (``python -m zodex_worker.template``) is started on first need and imports the
worker once; each spawn then asks it, over a socket pair only this process holds, to fork a
worker with the argv and environment :class:`~zodex_gateway.workers.launcher.DirectLauncher`
would have given a new process. The answer carries the worker's pidfd, so the gateway
signals exactly that process although it is the template's child; the template reports
each worker's exit status. A template that dies is started again on the next spawn, under a
restart policy of its own; while there is none (it gave up, or cannot start) workers are
started as new processes, as before, and that is logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from collections import deque
from typing import Any, Final

from zodex_gateway.workers.launcher import DirectLauncher, StartedWorker, WorkerSpec
from zodex_gateway.workers.restart_policy import RestartPolicy
from zodex_gateway.workers.runtime import worker_argv_overridden
from zodex_protocol.layout import WorkerRecord
from zodex_system import descriptor_limit

log = logging.getLogger("zodex.gateway.template")

TEMPLATE_READY_S: Final = 15.0  # as a worker's READY: imports on a loaded machine
FORK_ANSWER_S: Final = 5.0
STOP_WAIT_S: Final = 2.0
MAX_PACKET: Final = 1 << 16
# The status of a worker whose template died before it could say how the worker ended.
UNKNOWN_STATUS: Final = 255


class TemplateUnavailable(Exception):
    """One line: why no worker was forked."""


def template_switched_on() -> bool:
    """``ZODEX_WORKER_TEMPLATE=off`` starts every worker as a new process, in Local, Sprite
    and on fleet hosts alike (docs/config.md)."""
    return os.environ.get("ZODEX_WORKER_TEMPLATE", "on") != "off"


def template_wanted() -> bool:
    """Local forks from a template when switched on, unless a test's ``ZODEX_WORKER_ARGV``
    names a program the template is not."""
    return template_switched_on() and not worker_argv_overridden()


class ForkedWorker:
    """A worker the template forked, as the supervisor sees a child (``StartedWorker``)."""

    def __init__(self, pid: int, pidfd: int, loop: asyncio.AbstractEventLoop) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._loop = loop
        self._ended: asyncio.Future[int] = loop.create_future()
        self.stdout: asyncio.StreamReader | None = None

    @property
    def returncode(self) -> int | None:
        return self._ended.result() if self._ended.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def ended(self, status: int) -> None:
        if not self._ended.done():
            self._ended.set_result(status)
            with contextlib.suppress(OSError):
                self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)

    def watch_alone(self) -> None:
        """The template is gone and cannot report this worker's end: its pidfd does (the
        status is unknown; whoever adopted the orphan reaps it)."""
        if not self._ended.done():
            self._loop.add_reader(self._pidfd, self.ended, UNKNOWN_STATUS)

    def kill(self) -> None:
        """SIGKILL through the pidfd: never another process, whatever reused the pid."""
        if not self._ended.done():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class RunningTemplate:
    """One template process and its channel. Answers arrive in the order of requests;
    exit reports between them."""

    def __init__(self, proc: asyncio.subprocess.Process, channel: socket.socket) -> None:
        self.proc = proc
        self.channel = channel
        self._loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[int] = self._loop.create_future()
        self._answers: deque[asyncio.Future[ForkedWorker]] = deque()
        self._workers: dict[int, ForkedWorker] = {}
        self._one_request = asyncio.Lock()
        self.gone = False
        self.watching: asyncio.Future[None] | None = None  # the launcher's wait for its exit
        channel.setblocking(False)
        self._loop.add_reader(channel.fileno(), self._read)

    def _read(self) -> None:
        while not self.gone:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.channel, MAX_PACKET, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                for fd in fds:
                    os.close(fd)
                self.close()
                return
            try:
                message = json.loads(data)
            except ValueError:
                message = None
            if not isinstance(message, dict):  # not our template any more: stop using it
                for fd in fds:
                    os.close(fd)
                self.close()
                return
            self._dispatch(message, fds)

    def _dispatch(self, message: dict[str, Any], fds: list[int]) -> None:
        if "pid" not in message:
            for fd in fds:  # only a fork's answer carries one
                os.close(fd)
            fds = []
        if "ready" in message:
            if not self.ready.done():
                self.ready.set_result(int(message["ready"]))
        elif "exited" in message:
            worker = self._workers.pop(int(message["exited"]), None)
            if worker is not None:
                worker.ended(int(message["status"]))
        elif self._answers:
            answer = self._answers.popleft()
            if "pid" in message and len(fds) == 1:
                # Registered here, before any exit report that follows in this same read.
                worker = ForkedWorker(int(message["pid"]), fds[0], self._loop)
                self._workers[worker.pid] = worker
                answer.set_result(worker)
                return
            for fd in fds:
                os.close(fd)
            answer.set_exception(TemplateUnavailable(str(message.get("error", "a malformed answer"))))

    async def fork(self, argv: list[str], env: dict[str, str]) -> ForkedWorker:
        async with self._one_request:
            if self.gone:
                raise TemplateUnavailable("the template has exited")
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            stdout = asyncio.StreamReader()
            transport, _ = await self._loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(stdout), os.fdopen(read_end, "rb", buffering=0)
            )
            answer: asyncio.Future[ForkedWorker] = self._loop.create_future()
            try:
                self._answers.append(answer)
                payload = json.dumps({"argv": argv, "env": env}).encode()
                try:
                    socket.send_fds(self.channel, [payload], [write_end])
                except OSError as exc:
                    self.close()
                    raise TemplateUnavailable(f"the template's channel failed ({exc})") from None
            finally:
                os.close(write_end)  # the worker's copy is its stdout: EOF follows its READY
            try:
                worker = await asyncio.wait_for(answer, FORK_ANSWER_S)
            except TimeoutError:
                self.close()  # its answers would no longer match the requests
                raise TemplateUnavailable(f"the template did not answer within {FORK_ANSWER_S:g} s") from None
            except TemplateUnavailable:
                transport.close()
                raise
            worker.stdout = stdout
            return worker

    def close(self) -> None:
        """Stop using it: the template sees its channel close and exits; its workers go on,
        their ends now seen through their pidfds."""
        if self.gone:
            return
        self.gone = True
        self._loop.remove_reader(self.channel.fileno())
        self.channel.close()
        if not self.ready.done():
            self.ready.set_exception(TemplateUnavailable("the template exited while starting"))
        while self._answers:
            self._answers.popleft().set_exception(TemplateUnavailable("the template exited"))
        for worker in self._workers.values():
            worker.watch_alone()
        self._workers.clear()


class TemplateLauncher:
    """Forks workers from the template; everything else as :class:`DirectLauncher`."""

    def __init__(self, policy: RestartPolicy | None = None) -> None:
        self._direct = DirectLauncher()
        self.policy = policy or RestartPolicy()
        self._template: RunningTemplate | None = None
        self._starting = asyncio.Lock()
        self._closing = False
        self._said_unavailable = False

    async def spawn(self, spec: WorkerSpec) -> StartedWorker:
        if not template_wanted():
            return await self._direct.spawn(spec)
        try:
            template = await self._running()
            worker = await template.fork(spec.argv([]), dict(os.environ))
        except TemplateUnavailable as exc:
            if not self._said_unavailable:
                log.warning("worker template unavailable (%s); starting workers as new processes", exc)
                self._said_unavailable = True
            return await self._direct.spawn(spec)
        descriptor_limit.give_back(worker.pid)  # its commands get the usual open-files limit
        return worker

    async def _running(self) -> RunningTemplate:
        async with self._starting:
            if self._template is not None and not self._template.gone:
                return self._template
            if self._closing:
                raise TemplateUnavailable("the gateway is stopping")
            if self.policy.gave_up():
                raise TemplateUnavailable(
                    f"it crashed {self.policy.recent_crashes()} times in {self.policy.window_s:.0f}s"
                )
            template = await self._start()
            try:
                pid = await asyncio.wait_for(asyncio.shield(template.ready), TEMPLATE_READY_S)
            except (TimeoutError, TemplateUnavailable) as exc:
                template.close()
                with contextlib.suppress(ProcessLookupError):
                    template.proc.kill()
                raise TemplateUnavailable(f"it did not start: {exc or 'no answer in time'}") from None
            log.info("worker template started (pid %d)", pid)
            self._template = template
            self._said_unavailable = False
            return template

    async def _start(self) -> RunningTemplate:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "zodex_worker.template", "--channel", str(theirs.fileno()),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            ours.close()
            raise TemplateUnavailable(f"it could not be started ({exc.strerror or exc})") from None
        finally:
            theirs.close()
        descriptor_limit.give_back(proc.pid)
        template = RunningTemplate(proc, ours)
        template.watching = asyncio.ensure_future(self._watch(template))
        return template

    async def _watch(self, template: RunningTemplate) -> None:
        status = await template.proc.wait()
        template.close()
        # It exits 0 only when its channel closes; killed or failed, it crashed.
        if status != 0 and not self._closing:
            self.policy.record_crash()
            log.error("the worker template (pid %d) exited (status %d); it starts again on the next need",
                      template.proc.pid, status)  # fmt: skip

    @property
    def template_pid(self) -> int | None:
        """The running template's pid, if one runs."""
        template = self._template
        return None if template is None or template.gone else template.proc.pid

    async def close(self) -> None:
        """Stop the template (its workers are the supervisor's to stop)."""
        self._closing = True
        template = self._template
        if template is None:
            return
        template.close()
        try:
            await asyncio.wait_for(template.proc.wait(), STOP_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                template.proc.kill()
            await template.proc.wait()

    def kill_started(self, worker: StartedWorker) -> None:
        if isinstance(worker, ForkedWorker):
            worker.kill()
        else:
            self._direct.kill_started(worker)

    def kill_record(self, record: WorkerRecord) -> None:
        self._direct.kill_record(record)

    def end_orphans(self, marker: str) -> None:
        self._direct.end_orphans(marker)
