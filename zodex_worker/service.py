"""What a worker does, independent of how requests reach it.

:class:`WorkerService` spawns, types, polls, kills and patches; the ZeroMQ server
(server.py) and the gateway's in-process twin both call it with requests already read
and checked (``zodex_protocol.requests``). Tool-level refusals raise
:class:`~zodex_protocol.errors.ProtocolError` with a 2xx code.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from zodex_protocol import tombstones
from zodex_protocol.errors import STOPPING_MESSAGE, ErrorCode, ProtocolError
from zodex_protocol.events import ProcessStarted
from zodex_protocol.handles import SessionHandle
from zodex_protocol.limits import Limits
from zodex_protocol.replies import EvictedSession, Patched, PatchedFile, Pong, SessionResult
from zodex_protocol.requests import ExecRequest, PatchRequest, WriteRequest
from zodex_protocol.wait_pattern import EXITED, MATCHED, YIELD, WaitPattern
from zodex_system import proctree
from zodex_system.cgroups import Group, SessionGroups
from zodex_worker.call_waits import CallWait, WaitCancelled
from zodex_worker.output import SessionOutput
from zodex_worker.person_input import PersonInputs
from zodex_worker.pty_backend import Terminal, spawn_terminal
from zodex_worker.reaper import Reaper
from zodex_worker.results import session_result
from zodex_worker.session import EventPublisher, Session
from zodex_worker.sessions import SessionTable, Tombstone

EVICTED_CMD_CHARS = 200  # an evicted session's command, as reported, is cut to this

# docs/modes.md#environment-of-a-command: every command's environment gets these, whatever the mode.
COMMAND_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "LESS": "FRX",
    "NO_COLOR": "1",
    "TERM": "xterm-256color",
}


@dataclass
class WorkerConfig:
    worker_id: str
    incarnation: int
    workdir: str  # real path
    spill_dir: Path
    shell: list[str]  # argv prefix; the command line is appended
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cgroups: SessionGroups | None = None  # None: sessions rely on the environment marker
    host_incarnation: str = ""  # a fleet host's, ending every handle (docs/fleet.md)


class WorkerService:
    def __init__(
        self,
        config: WorkerConfig,
        reaper: Reaper,
        publish: EventPublisher,
        *,
        on_idle_change: Callable[[], None] = lambda: None,
    ) -> None:
        """``on_idle_change`` is called whenever a session starts or ends (the idle exit
        timer listens)."""
        self.config = config
        self.limits = config.limits
        self.table = SessionTable(config.limits.sessions_per_worker, config.limits.tombstone_s)
        self.person = PersonInputs(self.table)  # a person's keystrokes from a viewer
        self._reaper = reaper
        self._publish = publish
        self.stopping = False
        self._on_idle_change = on_idle_change

    # ---- requests ----------------------------------------------------------------------

    def ping(self) -> Pong:
        return Pong(
            worker_id=self.config.worker_id,
            incarnation=self.config.incarnation,
            pid=os.getpid(),
            workdir=self.config.workdir,
            live_sessions=self.table.running_count(),
        )

    async def exec(self, request: ExecRequest, call: CallWait | None = None) -> SessionResult:
        self._refuse_if_stopping()
        yield_ms = self.limits.clamp_yield(request.yield_time_ms, for_exec=True)
        timeout_ms = self.limits.clamp_timeout(request.timeout_ms)
        evicted = self.table.make_room()
        session = self._spawn(request, timeout_ms)
        try:
            if request.wait_for is None:
                await session.wait_exit(yield_ms / 1000, call)
            else:
                session.output.watch(request.wait_for)
                await session.wait_match(yield_ms / 1000, call)
        except WaitCancelled:
            # Nobody will see this reply, but the command goes on: its handle (in history,
            # on Liveboard, in the progress notes) must still answer (docs/sessions.md).
            session.handle_delivered = True
            raise
        async with session.lock:
            wait = _wait_outcome(session, request.wait_for)
            result = self.person.attach(
                session.handle, session_result(session, session.output.take_delta()).waited(*wait)
            )
            if result.session_handle is not None:  # running, or left jobs behind
                session.handle_delivered = True
            else:
                # Wire-only (the gateway strips it): history links the exited session's
                # output and lifecycle to this call, though the model never needs the handle.
                result = replace(result, session=session.handle)
            if not session.running and session.ending is not None and not session.ending.background:
                # Nobody holds this handle; a session that left jobs behind stays so its
                # timeout (or the runtime's stop) can still end them. Dropped once the
                # answer is sent: closing its PTY and group is not the caller's wait.
                asyncio.get_running_loop().call_soon(self.table.drop, session)
            session.last_used = time.monotonic()
            if evicted is not None:
                result = _report_eviction(result, evicted)
            return result

    async def write(self, request: WriteRequest, call: CallWait | None = None) -> SessionResult:
        handle, chars, kill = request.session_handle, request.chars, request.kill_process
        yield_ms = self.limits.clamp_yield(request.yield_time_ms, for_exec=False)
        found = self.table.find(handle)
        if found is None:
            raise ProtocolError(ErrorCode.UNKNOWN_HANDLE, f"Unknown session handle: {handle}")
        pattern = request.wait_for
        if isinstance(found, Tombstone):
            return self.person.attach(
                handle, tombstones.poll_result(found.final).waited(EXITED if pattern else None)
            )
        session = found
        async with session.lock:
            session.last_used = time.monotonic()
            if kill:
                await session.terminate("killed")
            elif chars:
                self._refuse_if_stopping()
                self.person.refuse_model_chars(handle)
                typed_at = time.monotonic()
                if pattern is not None:
                    session.output.watch(pattern, after_typing=True)
                if session.running:
                    await session.type(chars.encode("utf-8", "surrogatepass"))
                if pattern is None:
                    await session.wait_poll(yield_ms / 1000, output_after=typed_at, call=call)
                else:
                    await session.wait_match(yield_ms / 1000, call)
            elif pattern is not None:
                session.output.watch(pattern)
                await session.wait_match(yield_ms / 1000, call)
            else:
                await session.wait_poll(yield_ms / 1000, call=call)
            if not session.running:
                session.refresh_background()  # a poll reports the jobs still running now
            wait = _wait_outcome(session, pattern, killed=kill)
            result = self.person.attach(
                handle, session_result(session, session.output.take_delta()).waited(*wait)
            )
            session.last_used = time.monotonic()
            return result

    async def patch(self, request: PatchRequest) -> Patched:
        self._refuse_if_stopping()
        from zodex_worker.patch import apply_patch

        # File I/O of a big patch must not stall the PTY readers on this loop.
        outcome = await asyncio.to_thread(apply_patch, request.patch, request.workdir)
        files = tuple(
            PatchedFile(f.operation, f.path, f.old_path, f.added, f.removed, tuple(f.diff))
            for f in outcome.files
        )
        return Patched(ok=outcome.ok, text=outcome.text, files=files)

    async def shutdown(self) -> None:
        """Kill every session's processes (group and escapees) and forget the PTYs."""
        self.stopping = True
        sessions = list(self.table.live.values())
        await asyncio.gather(*(s.terminate("killed") for s in sessions), return_exceptions=True)
        for session in sessions:
            self.table.retire(session) if not session.running else session.discard()

    # ---- internals ---------------------------------------------------------------------

    def _refuse_if_stopping(self) -> None:
        if self.stopping:
            raise ProtocolError(ErrorCode.STOPPING, STOPPING_MESSAGE)

    def _running_leaders(self) -> set[int]:
        return {s.pid for s in self.table.live.values() if s.running}

    def _spawn(self, request: ExecRequest, timeout_ms: int) -> Session:
        cmd, workdir = request.cmd, request.workdir
        handle = str(
            SessionHandle.new(self.config.worker_id, self.config.incarnation, self.config.host_incarnation)
        )
        env = {**self.config.env, **COMMAND_ENV, "PWD": workdir, proctree.SESSION_MARKER: handle}
        env.pop("OLDPWD", None)
        try:
            terminal, group = self._spawn_terminal([*self.config.shell, cmd], workdir, env)
        except OSError as exc:
            raise ProtocolError(ErrorCode.SPAWN_FAILED, f"could not start the command: {exc}") from exc
        output = SessionOutput(
            spill_dir=self.config.spill_dir,
            spill_name=f"{time.strftime('%Y%m%dT%H%M%S')}-{handle}",
            inline_limit=self.limits.inline_output_chars,
            preview_chars=self.limits.preview_chars,
            preview_head_chars=self.limits.preview_chars * self.limits.preview_head_percent // 100,
            file_cap_bytes=self.limits.spill_file_cap_bytes,
        )
        session = Session(
            handle=handle,
            cmd=cmd,
            real_workdir=request.real_workdir,
            terminal=terminal,
            output=output,
            limits=self.limits,
            timeout_ms=timeout_ms,
            reaper=self._reaper,
            publish=self._publish,
            on_end=lambda _s: self._on_idle_change(),
            other_leaders=self._running_leaders,
            group=group,
        )
        self.table.add(session)
        self._publish(
            ProcessStarted(
                session=handle,
                pid=session.pid,
                cmd=cmd,
                cwd=workdir,
                started_at=session.started_wall,
                tag=request.tag,
            )
        )
        self._on_idle_change()
        return session

    def _spawn_terminal(
        self, argv: list[str], workdir: str, env: dict[str, str]
    ) -> tuple[Terminal, Group | None]:
        """Spawn inside the session's own cgroup when the worker has them
        (docs/sessions.md#process-groups-and-cgroups)."""
        groups = self.config.cgroups
        if groups is None:
            return spawn_terminal(argv, workdir, env), None
        spawned = groups.spawn_in(lambda: spawn_terminal(argv, workdir, env))
        # The next session's group is made while this command runs, not on its path.
        asyncio.get_running_loop().call_soon(groups.prepare)
        return spawned


def _wait_outcome(
    session: Session, pattern: WaitPattern | None, *, killed: bool = False
) -> tuple[str | None, str | None]:
    """What ended a call's wait_for (``wait``, ``matched_text``); (None, None) without one.
    The watch stops here, before the delta is taken. A kill ignores the pattern: it ends
    the command."""
    watch = session.output.unwatch()
    if pattern is None:
        return None, None
    if not killed and watch is not None and watch.matched is not None:
        return MATCHED, watch.matched
    return (YIELD if session.running and not killed else EXITED), None


def _report_eviction(result: SessionResult, evicted: Session) -> SessionResult:
    """Tell the model which session made room for this one (its handle now answers from
    its tombstone, and its left-behind jobs were ended): docs/sessions.md#capacity-and-eviction."""
    cmd = evicted.cmd
    if len(cmd) > EVICTED_CMD_CHARS:
        cmd = cmd[: EVICTED_CMD_CHARS - 1] + "…"
    return replace(
        result,
        evicted_session=EvictedSession(evicted.handle, cmd),
        summary=f"{result.summary}; evicted {evicted.handle} to make room",
    )
