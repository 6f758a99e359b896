"""The service's side of the root helper (:mod:`zodex_gateway.sprite.helper`): the
supervisor's launcher in Sprite. Workers are started and signalled by the helper; this
process, unprivileged, only asks, and learns of each worker's exit from the helper."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from zodex_gateway.sprite import helper
from zodex_gateway.workers.launcher import StartedWorker, WorkerSpec
from zodex_protocol.layout import WorkerRecord

log = logging.getLogger("zodex.sprite")

STOP_WAIT_S = 30.0
STDERR_LINE_CHARS = 2000
# The stderr of all workers together in the log: this many lines at once, then this many a
# second. One budget for all: a new worker must not bring a fresh one (the agent starts them).
STDERR_BURST_LINES = 200
STDERR_LINES_PER_S = 2.0


class HelperGone(Exception):
    """The root helper is gone: no worker can be started any more."""


class HelperWorker:
    """A worker the helper started: its pipes, and its exit as the helper reports it."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader) -> None:
        self.pid = pid
        self.stdout: asyncio.StreamReader | None = stdout
        self.returncode: int | None = None
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._exited.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)


class HelperLauncher:
    def __init__(self, sock: socket.socket, on_lost: Callable[[], None]) -> None:
        self._sock = sock
        self._on_lost = on_lost
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[tuple[dict[str, Any], list[int]]]] = {}
        self._workers: dict[int, HelperWorker] = {}
        self._early_exits: dict[int, int] = {}
        self._stopped: asyncio.Future[None] | None = None
        self._gone = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._stderr_budget = LineBudget()
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)

    # ---- the launcher protocol ------------------------------------------------------------

    async def spawn(self, spec: WorkerSpec) -> StartedWorker:
        request = next(self._ids)
        reply = asyncio.get_running_loop().create_future()
        self._pending[request] = reply
        self._send(
            {
                "op": "spawn",
                "id": request,
                "workdir": spec.workdir,
                "worker_id": spec.worker_id,
                "incarnation": spec.incarnation,
                "limits": spec.limits.to_dict(),
            }
        )
        message, fds = await reply
        if message.get("op") != "spawned" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise OSError(str(message.get("error", "the root helper did not start the worker")))
        out_fd, err_fd = fds
        stdout = await _reader(out_fd)
        worker = HelperWorker(int(message["pid"]), stdout)
        self._workers[worker.pid] = worker
        if worker.pid in self._early_exits:
            worker.exited(self._early_exits.pop(worker.pid))
        self._log_pipe(err_fd, f"worker {worker.pid}")
        return worker

    def _log_pipe(self, fd: int, who: str) -> None:
        task = asyncio.create_task(_log_stderr(who, fd, self._stderr_budget))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def kill_started(self, worker: StartedWorker) -> None:
        if worker.returncode is None:
            self._send({"op": "kill_started", "pid": worker.pid})

    def kill_record(self, record: WorkerRecord) -> None:
        self._send({"op": "kill_record", "pid": record.pid, "start": record.pid_start})

    def end_orphans(self, marker: str) -> None:
        self._send({"op": "end_orphans", "marker": marker})

    # ---- stopping -------------------------------------------------------------------------

    async def stop(self) -> None:
        """Ask the helper to kill every process of the agent account and exit; wait for it."""
        if self._gone:
            return
        self._stopped = asyncio.get_running_loop().create_future()
        self._send({"op": "stop"})
        try:
            await asyncio.wait_for(asyncio.shield(self._stopped), STOP_WAIT_S)
        except TimeoutError:
            log.error("the root helper did not confirm the agent's processes were killed")

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()

    # ---- messages -------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        if self._gone:
            raise OSError("the root helper is gone; restart the service")
        try:
            helper.send(self._sock, message)
        except OSError:
            self._lost()
            raise

    def _on_readable(self) -> None:
        try:
            message, fds = helper.receive(self._sock)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("bad message from the root helper: %s", exc)
            return
        except OSError:
            message, fds = None, []
        if message is None:
            self._lost()
            return
        op = message.get("op")
        if op == "exited":
            pid, code = message.get("pid"), message.get("status")
            if isinstance(pid, int) and isinstance(code, int):
                worker = self._workers.pop(pid, None)
                if worker is not None:
                    worker.exited(code)
                else:
                    self._early_exits[pid] = code
        elif op == "template" and len(fds) == 1 and isinstance(message.get("pid"), int):
            self._log_pipe(fds[0], f"worker template {message['pid']}")
            return
        elif op == "template_ready":
            log.info("worker template ready (pid %s)", message.get("pid"))
        elif op == "stopped":
            if self._stopped is not None and not self._stopped.done():
                self._stopped.set_result(None)
        elif op in ("spawned", "error"):
            request = message.get("id")
            reply = self._pending.pop(request, None) if isinstance(request, int) else None
            if reply is not None and not reply.done():
                reply.set_result((message, fds))
                return
            if op == "error":
                log.warning("the root helper refused a request: %s", message.get("error"))
        for fd in fds:
            os.close(fd)

    def _lost(self) -> None:
        if self._gone:
            return
        self._gone = True
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        for reply in self._pending.values():
            if not reply.done():
                reply.set_exception(OSError("the root helper is gone; restart the service"))
        self._pending.clear()
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)  # it exits only after killing the agent's processes
            return
        log.error("the root helper exited; stopping the service")
        self._on_lost()


async def _reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0))
    return reader


class LineBudget:
    """How many lines of the workers' stderr reach the log: a burst, then a steady rate.

    The worker runs as the agent, which can write anything to its stderr (ptrace lets it
    make the worker write): unbounded, that would fill the service's disk and spend its
    time logging. Counted on a clock read per line, no timer."""

    def __init__(
        self,
        burst: int = STDERR_BURST_LINES,
        per_s: float = STDERR_LINES_PER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst = burst
        self._per_s = per_s
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self.dropped = 0

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_s)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.dropped += 1
        return False


def _report_dropped(budget: LineBudget) -> None:
    if budget.dropped:
        log.warning("%d lines of the workers' stderr were not logged (too many)", budget.dropped)
        budget.dropped = 0


async def _log_stderr(who: str, fd: int, budget: LineBudget) -> None:
    """A worker's (or the worker template's) stderr, line by line, into the service's log (it cannot write the log
    itself), within the :class:`LineBudget` all workers share; the pipe is always drained.
    The log's formatter escapes each line (docs/security.md#logs)."""
    reader = await _reader(fd)
    while True:
        try:
            line = await reader.readline()
        except ValueError:  # a line longer than the reader's limit
            line = b"(an over-long line)\n"
        except (OSError, asyncio.IncompleteReadError):
            line = b""
        if not line:
            break
        if not budget.take():
            continue
        _report_dropped(budget)
        log.warning("%s: %s", who, line.decode("utf-8", "replace").rstrip()[:STDERR_LINE_CHARS])
    _report_dropped(budget)


def stop_on_helper_loss() -> None:
    """What the service does when its helper is gone: the usual stop (SIGTERM to itself)."""
    os.kill(os.getpid(), signal.SIGTERM)
