"""Finding, starting, watching and stopping workers — with no session table.

``worker_for(real path)`` connects to the workdir's worker, spawning it under a file lock
(so two gateways never start two workers for one workdir) and waiting for its ``READY``
line. ``route_handle`` reads the worker id and incarnation out of a handle and answers:
the live worker, the tombstone an incarnation left when it exited cleanly, *lost* when
that incarnation was registered as started and died, or *unknown*.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import zmq
import zmq.asyncio

from zodex_gateway.workers import spawn_lock
from zodex_gateway.workers.idle_workers import IdleWorkerCap
from zodex_gateway.workers.launcher import Launcher, StartedWorker, WorkerSpec
from zodex_gateway.workers.restart_policy import RestartPolicy
from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.template_launcher import TemplateLauncher
from zodex_gateway.workers.worker_client import WorkerClient
from zodex_gateway.workers.worker_ends import WorkerEnds
from zodex_protocol import messages, tombstones
from zodex_protocol.envelope import WireCodec
from zodex_protocol.errors import STOPPING_MESSAGE, ErrorCode, ProtocolError
from zodex_protocol.handles import MAX_INCARNATION, SessionHandle, worker_id_for
from zodex_protocol.layout import WorkerRecord
from zodex_protocol.limits import max_message_bytes
from zodex_protocol.replies import SessionResult
from zodex_protocol.version import PROTOCOL_VERSION
from zodex_system import cgroups, in_the_way, proctree

log = logging.getLogger("zodex.gateway")

READY_TIMEOUT_S = 15.0
HEALTH_TIMEOUT_S = 3.0
# Liveness is an event (pidfd); health — a worker that is alive but no longer answers — can
# only be probed, every ``limits.health_interval_ms``, through the real request path.
HEALTH_FAILURES_ALLOWED = 2
# The worker's own kill grace (5 s) plus margin, inside the 10 s of docs/config.md#fixed-numbers.
SHUTDOWN_WAIT_S = 8.0


def lost_message(handle: str, workdir: str) -> str:
    return f"session {handle} was lost: the worker for {workdir} exited unexpectedly; start the command again"


NewWorkerListener = Callable[[WorkerRecord], Awaitable[None]]


def record_alive(record: WorkerRecord) -> bool:
    return proctree.is_alive(record.pid, record.pid_start)


class Supervisor:
    def __init__(self, runtime: Runtime, launcher: Launcher | None = None) -> None:
        self.runtime = runtime
        # Starts and signals workers: forked from this gateway's worker template (Local), or
        # through Sprite's root helper.
        self.template: TemplateLauncher | None = None
        if launcher is None:
            self.template = launcher = TemplateLauncher()
        self.launcher: Launcher = launcher
        self.layout = runtime.layout
        self.codec = WireCodec(runtime.key)
        self._max_message = max_message_bytes(runtime.limits)
        self.context = zmq.asyncio.Context()
        self.clients: dict[str, WorkerClient] = {}
        self._ends = WorkerEnds(self.layout, lambda: self._stopping)
        self.policies = self._ends.policies
        self._locks: dict[str, asyncio.Lock] = {}
        self._children: dict[int, StartedWorker] = {}
        self._health_failures: dict[str, int] = {}
        self._health_task: asyncio.Task[None] | None = None
        self._group_removals: set[asyncio.Future[bool]] = set()
        self._new_worker_listeners: list[NewWorkerListener] = []
        self._stopping = False
        self._idle_cap = IdleWorkerCap(
            self.clients, self._locks, runtime.limits.max_idle_workers, lambda: self._stopping
        )

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop_accepting(self) -> None:
        """Refuse new tool calls from now on (a stop has begun); in-flight ones go on."""
        self._stopping = True

    def add_new_worker_listener(self, listener: NewWorkerListener) -> None:
        """``listener`` is awaited for each worker before this gateway first uses it (history
        subscribes to its events there, so none is missed)."""
        self._new_worker_listeners.append(listener)

    # ---- workdir → worker --------------------------------------------------------------

    async def worker_for(self, real_path: str) -> WorkerClient:
        if self.stopping:
            raise ProtocolError(ErrorCode.STOPPING, STOPPING_MESSAGE)
        worker_id = worker_id_for(real_path)
        self._check_runtime_dir(worker_id)
        self._idle_cap.touch(worker_id)
        client = self.clients.get(worker_id)
        if client is not None and client.alive:
            return client
        async with self._locks.setdefault(worker_id, asyncio.Lock()):
            client = self.clients.get(worker_id)
            if client is not None and client.alive:
                return client
            lock_fd = await self._lock_spawn(worker_id, real_path)
            try:
                client = await self._connect_or_spawn(worker_id, real_path)
            finally:
                os.close(lock_fd)  # closing drops the flock
        self._idle_cap.adopted(worker_id)
        return client

    async def _lock_spawn(self, worker_id: str, real_path: str) -> int:
        path = self.layout.spawn_lock(worker_id)
        try:
            return await spawn_lock.take(path)
        except spawn_lock.SpawnLockUnavailable as exc:
            raise ProtocolError(
                ErrorCode.WORKER_UNAVAILABLE,
                f"could not start a worker for {real_path}: its spawn lock {path} {exc}; retry",
            ) from None

    async def _connect_or_spawn(self, worker_id: str, real_path: str) -> WorkerClient:
        record = self.layout.read_record(worker_id)
        if record is not None and record_alive(record):
            client = await self._connect(record)
            if client is not None:
                return client
            self._kill_record(record, "it was alive but did not answer")  # a hung worker
        if record is not None:
            self._note_end(record)
        policy = self._ends.policy(worker_id)
        if policy.gave_up():
            raise ProtocolError(
                ErrorCode.WORKER_UNAVAILABLE,
                f"the worker for {real_path} crashed {policy.recent_crashes()} times in "
                f"{policy.window_s:.0f}s; not restarting it for now. Check the gateway log, then retry later",
            )
        incarnation = record.incarnation % (MAX_INCARNATION - 1) + 1 if record else 1
        # Incarnation numbers wrap: what an earlier holder of this one left must not
        # answer for the new one's handles.
        _clear_for(self.layout.started_file(worker_id, incarnation), real_path)
        _clear_for(self.layout.exit_file(worker_id, incarnation), real_path)
        return await self._spawn(worker_id, incarnation, real_path, policy)

    async def _spawn(
        self, worker_id: str, incarnation: int, real_path: str, policy: RestartPolicy
    ) -> WorkerClient:
        spec = WorkerSpec(
            runtime_dir=self.layout.root,
            workdir=real_path,
            worker_id=worker_id,
            incarnation=incarnation,
            spill_dir=self.runtime.spill_dir,
            shell=self.runtime.shell,
            limits=self.runtime.limits,
        )
        try:
            proc = await self.launcher.spawn(spec)
        except OSError as exc:  # no process to spare, the helper gone: the tool's error
            raise ProtocolError(
                ErrorCode.WORKER_UNAVAILABLE,
                f"could not start a worker for {real_path}: {exc.strerror or exc}; retry",
            ) from None
        self._children[proc.pid] = proc
        key = (worker_id, incarnation)
        proc_wait = asyncio.ensure_future(proc.wait())
        proc_wait.add_done_callback(lambda _f: self._children.pop(proc.pid, None))
        proc_wait.add_done_callback(lambda f: self._ends.log_exit(key, real_path, proc.pid, f))
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT_S)
        except TimeoutError:
            line = b""
        record = self.layout.read_record(worker_id)
        if line.strip() != b"READY" or record is None or record.incarnation != incarnation:
            if line == b"":  # its stdout closed: it is exiting by itself, let it say how
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(proc_wait), READY_TIMEOUT_S)
            self.launcher.kill_started(proc)
            code = await proc_wait
            self._ends.failed_start(key, real_path, policy)
            raise ProtocolError(
                ErrorCode.WORKER_UNAVAILABLE,
                f"could not start a worker for {real_path}: it exited during start-up (status {code}); "
                "check the gateway log and retry",
            )
        self._ends.started(key)
        client = WorkerClient(
            record, self.context, self.codec, self._client_exited, max_message=self._max_message
        )
        await self._adopt(client)
        log.info("worker for %s started (pid %d, incarnation %d)", real_path, proc.pid, incarnation)
        return client

    async def _adopt(self, client: WorkerClient) -> None:
        for listener in self._new_worker_listeners:
            await listener(client.record)
        self.clients[client.worker_id] = client
        if self._health_task is None:
            self._health_task = asyncio.create_task(self._check_health())

    async def _check_health(self) -> None:
        while not self.stopping:
            await asyncio.sleep(self.runtime.limits.health_interval_ms / 1000)
            for client in [c for c in self.clients.values() if c.alive]:
                try:
                    await client.request(messages.PING, {}, timeout=HEALTH_TIMEOUT_S)
                    self._health_failures.pop(client.worker_id, None)
                except (TimeoutError, ProtocolError):
                    failures = self._health_failures.get(client.worker_id, 0) + 1
                    self._health_failures[client.worker_id] = failures
                    if failures >= HEALTH_FAILURES_ALLOWED and client.alive:
                        log.warning("worker for %s stopped answering; killing it", client.record.workdir)
                        self._kill_record(client.record, "it stopped answering health checks")
                        client.mark_dead()

    async def _connect(self, record: WorkerRecord) -> WorkerClient | None:
        if record.protocol != PROTOCOL_VERSION:
            log.warning("worker %s speaks protocol %s; replacing it", record.worker_id, record.protocol)
            return None
        client = WorkerClient(
            record, self.context, self.codec, self._client_exited, max_message=self._max_message
        )
        try:
            await client.request(messages.PING, {}, timeout=HEALTH_TIMEOUT_S)
        except (TimeoutError, ProtocolError):
            client.close()
            return None
        await self._adopt(client)
        return client

    def _kill_record(self, record: WorkerRecord, reason: str | None = None) -> None:
        info = proctree.read_proc(record.pid)
        if info is not None and info.start == record.pid_start:
            if reason is not None:
                self._ends.killing((record.worker_id, record.incarnation), reason)
            self.launcher.kill_record(record)

    def _client_exited(self, client: WorkerClient) -> None:
        if self.clients.get(client.worker_id) is client:
            del self.clients[client.worker_id]
        self._idle_cap.exited(client.worker_id)
        if not self.stopping:
            self._note_end(client.record)

    def _note_end(self, record: WorkerRecord) -> None:
        if not self._ends.unclean_end(record):
            return
        # Its sessions are lost; commands that survived the PTY hang-up must not run on
        # unowned. Their environment names the incarnation that started them.
        prefix = str(SessionHandle(record.worker_id, record.incarnation, "")).rstrip("-")
        self.launcher.end_orphans(f"{proctree.SESSION_MARKER}={prefix}-")
        # Where sessions have cgroups, those hold even what cleared its environment.
        group = cgroups.worker_group_of(self.layout.root, record.worker_id, record.incarnation)
        if group is not None and group.path.is_dir():
            group.kill()
            removal = asyncio.ensure_future(asyncio.to_thread(group.kill_and_remove))
            self._group_removals.add(removal)
            removal.add_done_callback(self._group_removals.discard)

    # ---- a removed runtime directory ----------------------------------------------------

    def _check_runtime_dir(self, worker_id: str | None) -> None:
        """Make the runtime directory again if it was removed under us, and end the
        workers whose sockets went with it: nobody else can reach them, so their handles
        answer *lost* (docs/sessions.md#after-exit). A few stats per call, whatever the
        number of workers: every worker's socket is looked at only when the directory
        was made again, otherwise only that of ``worker_id``, the one this call is for."""
        restored = self.runtime.restore_directory()
        if restored:
            log.warning("the runtime directory %s was removed; made it again", self.layout.root)
        elif not self.runtime.owner and not self.layout.workers_dir.is_dir():
            raise ProtocolError(
                ErrorCode.WORKER_UNAVAILABLE,
                f"the runtime directory {self.layout.root} was removed; restart this gateway",
            )
        if restored:
            looked_at = list(self.clients.values())
        else:
            one = self.clients.get(worker_id) if worker_id is not None else None
            looked_at = [] if one is None else [one]
        for client in looked_at:
            if client.alive and not os.path.exists(client.record.request_endpoint.removeprefix("ipc://")):
                self._abandon(client)
        if restored:
            self.runtime.release_stale_locks()  # workers of other gateways stop cleanly

    def _abandon(self, client: WorkerClient) -> None:
        record = client.record
        log.warning("the sockets of the worker for %s were removed; ending it", record.workdir)
        key = (record.worker_id, record.incarnation)
        self._ends.abandoned(key)
        # Registered as started (again, if the registry went with the directory), so its
        # handles answer lost; the next incarnation gets a higher number.
        with contextlib.suppress(OSError):
            record.write(self.layout.started_file(*key))
            if self.layout.read_record(record.worker_id) is None:
                record.write(self.layout.record_file(record.worker_id))
        self._kill_record(record, "its sockets were removed")
        client.mark_dead()  # ends its sessions' processes (_note_end)

    # ---- handle → worker ---------------------------------------------------------------

    async def route_handle(self, text: str) -> WorkerClient | SessionResult:
        """The worker that owns a handle, or the final result of an exited incarnation.

        *Lost* is only an incarnation the registry recorded as started, now gone without
        its clean-exit file; anything else is unknown, naming no directory
        (docs/sessions.md#handles)."""
        if self.stopping:
            raise ProtocolError(ErrorCode.STOPPING, STOPPING_MESSAGE)
        handle = SessionHandle.parse(text)
        self._check_runtime_dir(None if handle is None else handle.worker_id)
        unknown = ProtocolError(ErrorCode.UNKNOWN_HANDLE, f"Unknown session handle: {text}")
        if handle is None:
            raise unknown
        record = self.layout.read_record(handle.worker_id)
        if record is not None and handle.incarnation == record.incarnation:
            self._idle_cap.touch(handle.worker_id)
            client = self.clients.get(handle.worker_id)
            if client is not None and client.alive and client.incarnation == record.incarnation:
                return client
            if record_alive(record):
                async with self._locks.setdefault(handle.worker_id, asyncio.Lock()):
                    client = await self._connect(record) if record_alive(record) else None
                if client is not None:
                    return client
        exit_file = self.layout.exit_file(handle.worker_id, handle.incarnation)
        if exit_file.exists():
            # Up to 64 MiB the agent may have written: read and decoded on a thread.
            final = await asyncio.to_thread(tombstones.answer_from_file, exit_file, text)
            if final is None:
                raise unknown
            return final
        started = self.layout.read_record(handle.worker_id, handle.incarnation)
        if started is not None and (started.worker_id, started.incarnation) == (
            handle.worker_id,
            handle.incarnation,
        ):
            raise ProtocolError(ErrorCode.SESSION_LOST, lost_message(text, started.workdir))
        raise unknown

    # ---- shutdown ----------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Stop every worker this gateway knows of (all of them when it owns the runtime)."""
        self._stopping = True
        if self._health_task is not None:
            self._health_task.cancel()
        self._idle_cap.cancel()
        records = self._known_records()
        await asyncio.gather(*(self._stop_worker(r) for r in records), return_exceptions=True)
        await asyncio.gather(*self._group_removals, return_exceptions=True)
        for client in list(self.clients.values()):
            client.close()
        self.clients.clear()
        self.context.destroy(linger=0)
        if self.template is not None:
            await self.template.close()

    def _known_records(self) -> list[WorkerRecord]:
        if not self.runtime.owner:
            return [c.record for c in self.clients.values()]
        records = []
        for path in self.layout.workers_dir.glob("*.json"):
            record = self.layout.read_record(path.stem)
            if record is not None and record_alive(record):
                records.append(record)
        return records

    async def _stop_worker(self, record: WorkerRecord) -> None:
        client = self.clients.get(record.worker_id)
        if client is None or not client.alive:
            client = WorkerClient(
                record, self.context, self.codec, lambda _c: None, max_message=self._max_message
            )
        try:
            await client.request(messages.SHUTDOWN, {}, timeout=SHUTDOWN_WAIT_S)
        except (TimeoutError, ProtocolError):
            pass
        proc = self._children.get(record.pid)
        if proc is not None:
            try:
                await asyncio.wait_for(proc.wait(), 1.0)
            except TimeoutError:
                self.launcher.kill_started(proc)
        elif record_alive(record):
            self._kill_record(record)


def _clear_for(path: Path, workdir: str) -> None:
    """Remove what is at ``path`` before a new incarnation uses the name. In Sprite the
    registry directory is the agent's to write: an empty directory planted there goes too,
    anything that cannot be removed fails the call with the project's words, not an errno."""
    if not in_the_way.clear(path):
        raise ProtocolError(
            ErrorCode.WORKER_UNAVAILABLE,
            f"could not start a worker for {workdir}: {path} is in the way and cannot be removed; "
            "remove it, then retry",
        )
