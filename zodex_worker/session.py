"""One command in one PTY: reading, exit, drain, timeout and termination.

Everything runs on the worker's event loop. The PTY master is read with ``add_reader``
(no thread, no timer); the leader's exit arrives from the :class:`~zodex_worker.reaper.Reaper`;
the few timers are deadlines (drain, timeout, kill grace), never polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from zodex_protocol.events import OutputEvent, ProcessEnded, WorkerEvent
from zodex_protocol.limits import Limits
from zodex_protocol.progress import ProgressNote
from zodex_system import proctree
from zodex_system.cgroups import Group
from zodex_worker.call_waits import CallWait, WaitCancelled
from zodex_worker.output import SessionOutput
from zodex_worker.output.screen import SessionScreen
from zodex_worker.pty_backend import COLS, ROWS, Terminal
from zodex_worker.reaper import Reaper

READ_CHUNK = 64 * 1024
READS_PER_WAKEUP = 8  # drain a busy PTY in a few reads per wake-up instead of one
# Raw output per event, at most (about). Each event costs its subscribers a fixed amount
# beside its bytes (a wakeup, a signature check, a history transaction): at 64 KiB that
# was a third of what history spent on a flood of output.
EVENT_BYTES = 256 * 1024
EVENT_DELAY_S = 0.02  # how long the first text of an event may wait for company


@dataclass
class Ending:
    exit_code: int
    signal: str | None
    reason: str  # "exit" | "timeout" | "killed"
    ended_at: float  # monotonic
    background: int  # left-behind processes still running, as last counted
    left_behind: int = 0  # how many the command left behind when it ended


EventPublisher = Callable[[WorkerEvent], None]


class Session:
    def __init__(
        self,
        *,
        handle: str,
        cmd: str,
        real_workdir: str,
        terminal: Terminal,
        output: SessionOutput,
        limits: Limits,
        timeout_ms: int,
        reaper: Reaper,
        publish: EventPublisher,
        on_end: Callable[[Session], None],
        other_leaders: Callable[[], set[int]] = set,
        group: Group | None = None,
    ) -> None:
        self.handle = handle
        self.cmd = cmd
        self.cwd = real_workdir  # where the command started, until its own is read
        self.terminal = terminal
        self.output = output
        self.screen = SessionScreen(ROWS, COLS)  # fed only while a program draws on it
        self.limits = limits
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.last_used = self.started
        self.lock = asyncio.Lock()  # serialises the calls on this session
        self.ending: Ending | None = None
        self.handle_delivered = False
        self._loop = asyncio.get_running_loop()
        self._publish = publish
        self._on_end = on_end
        self.other_leaders = other_leaders
        # The session's cgroup, when it has one: the kernel's list of every process the
        # command started, marker or not (docs/sessions.md#process-groups-and-cgroups).
        self.group = group
        self._reaper = reaper
        self._leader_status: int | None = None
        self._eof = False
        self._reason = "exit"
        self._changed = asyncio.Event()
        self._last_output = 0.0
        self._output_seq = 0
        self._event_text: list[str] = []
        self._event_size = 0
        self._event_timer: asyncio.TimerHandle | None = None
        self._drain_timer: asyncio.TimerHandle | None = None
        self._term_task: asyncio.Task[None] | None = None
        self._members: list[proctree.ProcInfo] = []
        self.pid = terminal.pid
        # Only the marker sweep needs the leader's start time; a group lists its own members.
        self.pid_start = proctree.start_time(self.pid) if group is None else None
        reaper.watch(self.pid, self._leader_exited)
        self._loop.add_reader(terminal.fd, self._readable)
        self._timeout = self._loop.call_later(timeout_ms / 1000, self._timed_out)
        self._timeout_ms = timeout_ms

    # ---- state -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.ending is None

    def wall_time_ms(self) -> int:
        end = self.ending.ended_at if self.ending else time.monotonic()
        return int((end - self.started) * 1000)

    def refresh_cwd(self) -> str:
        """The leader's live working directory, or the last one seen once it is gone."""
        if self.running:
            try:
                self.cwd = os.readlink(f"/proc/{self.pid}/cwd")
            except OSError:
                pass
        return self.cwd

    # ---- reading -----------------------------------------------------------------------

    def _readable(self) -> None:
        for _ in range(READS_PER_WAKEUP):
            try:
                data = os.read(self.terminal.fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError as exc:
                # EIO: every slave fd is closed — the PTY is drained.
                if exc.errno not in (errno.EIO, errno.EBADF):
                    raise
                data = b""
            if not data:
                self._at_eof()
                return
            if self.ending is not None:
                continue  # left-behind background output after the result was final
            raw = self.output.feed(data)
            self.screen.feed(raw)
            self._last_output = time.monotonic()
            self._changed.set()
            if raw:
                self._queue_output_event(raw)

    def _queue_output_event(self, raw: str) -> None:
        """Coalesce raw output into few events: a command printing a line per millisecond
        must not cost every subscriber a message per line. An event leaves once 256 KiB are
        waiting or 20 ms after its first text (a deadline, not a poll), and always before
        the process_ended event."""
        self._event_text.append(raw)
        self._event_size += len(raw)
        if self._event_size >= EVENT_BYTES:
            self._flush_output_event()
        elif self._event_timer is None:
            self._event_timer = self._loop.call_later(EVENT_DELAY_S, self._flush_output_event)

    def _flush_output_event(self) -> None:
        if self._event_timer is not None:
            self._event_timer.cancel()
            self._event_timer = None
        if not self._event_text:
            return
        text = "".join(self._event_text)
        self._event_text.clear()
        self._event_size = 0
        self._output_seq += 1  # lets a subscriber see that it missed events
        self._publish(OutputEvent(self.handle, self._output_seq, text))

    def _close_terminal_soon(self) -> None:
        """Close the PTY once the loop's ready callbacks have run: the kernel's teardown of
        a terminal is the costliest step of a command's end, and a caller waiting on it
        (an exec that ended within its yield) can be answered first."""
        self._loop.call_soon(self.terminal.close)

    def _at_eof(self) -> None:
        self._eof = True
        self._loop.remove_reader(self.terminal.fd)
        if self.ending is not None:
            self._close_terminal_soon()
        else:
            self._maybe_end()

    # ---- exit --------------------------------------------------------------------------

    def _leader_exited(self, _pid: int, status: int) -> None:
        self._leader_status = status
        if not self._eof:
            # Trailing output may still be in flight; give it a bounded moment.
            self._drain_timer = self._loop.call_later(self.limits.drain_ms / 1000, self._drained)
        self._maybe_end()

    def _drained(self) -> None:
        self._drain_timer = None
        if self.ending is None:
            self._end()

    def _maybe_end(self) -> None:
        if self.ending is None and self._leader_status is not None and self._eof:
            self._end()

    def _end(self) -> None:
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        status = self._leader_status if self._leader_status is not None else 0
        if os.WIFSIGNALED(status):
            code, sig = -1, signal.Signals(os.WTERMSIG(status)).name
        else:
            code, sig = os.WEXITSTATUS(status), None
        tail = self.output.finish()
        self.screen.feed(tail)
        if tail:
            self._event_text.append(tail)
        self._flush_output_event()
        self.output.close()
        leftovers = self._find_members() if self._may_have_members() else []
        self._members = leftovers
        self.ending = Ending(code, sig, self._reason, time.monotonic(), len(leftovers), len(leftovers))
        if not leftovers and self._term_task is None:
            self._timeout.cancel()
        self._changed.set()
        if self._eof:
            self._close_terminal_soon()  # after the waiter set going just above
        self._publish(
            ProcessEnded(
                session=self.handle,
                exit_code=code,
                signal=sig,
                reason=self._reason,
                ended_at=time.time(),
                background=len(leftovers),
                output_events=self._output_seq,
            )
        )
        self._on_end(self)

    # ---- waiting -----------------------------------------------------------------------

    async def wait_exit(self, timeout: float, call: CallWait | None = None) -> None:
        """Until the command ends or ``timeout`` passes; raises WaitCancelled if ``call`` is cancelled."""
        await self._wait_until(lambda: not self.running, timeout, call)

    async def wait_match(self, timeout: float, call: CallWait | None = None) -> None:
        """docs/tools.md#waiting-for-output: the output matched its watch, or the command
        ended, or the yield window passed. Checked each time output or the end wakes this
        task (the readers set ``_changed``), never on a timer."""
        await self._wait_until(lambda: self.output.check_watch() or not self.running, timeout, call)

    async def _wait_until(self, done: Callable[[], bool], timeout: float, call: CallWait | None) -> None:
        deadline = time.monotonic() + timeout
        with self._waiting(call):
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                await self._wait_changed(remaining, call)

    async def wait_poll(
        self, timeout: float, *, output_after: float = 0.0, call: CallWait | None = None
    ) -> None:
        """docs/tools.md#write_stdin poll: exit, or new output then 250 ms of quiet, or the yield window.

        ``output_after`` (a monotonic time) ignores output older than it: after typing,
        the answer to what was typed is awaited, not text that was already waiting.
        """
        deadline = time.monotonic() + timeout
        settle = self.limits.poll_settle_ms / 1000
        with self._waiting(call):
            while self.running:
                now = time.monotonic()
                if now >= deadline:
                    return
                wake_at = deadline
                if self.output.has_undelivered() and self._last_output >= output_after:
                    quiet_at = self._last_output + settle
                    if now >= quiet_at:
                        return
                    wake_at = min(deadline, quiet_at)
                await self._wait_changed(wake_at - now, call)

    @contextlib.contextmanager
    def _waiting(self, call: CallWait | None) -> Iterator[None]:
        """A call's wait: a cancel wakes it, and its progress is reported while it lasts."""
        if call is None:
            yield
            return
        call.raise_if_cancelled()
        call.waiting_on(self._changed.set)
        ticker = call.reporting(self.progress_note)
        try:
            yield
        except WaitCancelled:
            self.output.unwatch()  # a cancelled wait_for leaves no watch for the next call
            raise
        finally:
            call.waiting_on(None)
            if ticker is not None:
                ticker.close()

    def progress_note(self) -> ProgressNote:
        return ProgressNote(self.handle, self.wall_time_ms(), self.output.pending_chars)

    async def _wait_changed(self, timeout: float, call: CallWait | None = None) -> None:
        """Until something changed or ``timeout`` passed; raises WaitCancelled if ``call`` was."""
        self._changed.clear()
        # In this task (no task of its own, as wait_for makes): woken in one turn of the loop.
        try:
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        except TimeoutError:
            pass
        if call is not None:
            call.raise_if_cancelled()

    # ---- input -------------------------------------------------------------------------

    async def type(self, data: bytes) -> None:
        """Write everything, waiting on the fd (not a timer) when the PTY is full."""
        view = memoryview(data)
        while view:
            try:
                written = self.terminal.write(view.tobytes())
                view = view[written:]
            except BlockingIOError:
                ready: asyncio.Future[None] = self._loop.create_future()

                def writable(ready: asyncio.Future[None] = ready) -> None:
                    if not ready.done():
                        ready.set_result(None)

                self._loop.add_writer(self.terminal.fd, writable)
                try:
                    await ready
                finally:
                    self._loop.remove_writer(self.terminal.fd)

    # ---- termination -------------------------------------------------------------------

    def _may_have_members(self) -> bool:
        if self.group is not None:
            return self.group.populated()
        return proctree.may_have_members(self.pid, self.other_leaders())

    def _find_members(self) -> list[proctree.ProcInfo]:
        if self.group is not None:
            return proctree.members_of(self.group.procs())
        return proctree.session_members(self.pid, self.pid_start, self.handle)

    def _timed_out(self) -> None:
        if self.running:
            self._reason = "timeout"
            seconds = self._timeout_ms / 1000
            self.output.add_notice(f"[zodex] command timed out after {seconds:.1f}s and was terminated")
            self._changed.set()
        self.terminate()

    def terminate(self, reason: str | None = None) -> asyncio.Task[None]:
        """TERM the group and every tracked member, KILL after the grace; idempotent."""
        if reason is not None and self.running and self._reason == "exit":
            self._reason = reason
        if self._term_task is None:
            self._term_task = self._loop.create_task(self._terminate())
        return self._term_task

    async def _terminate(self) -> None:
        grace = self.limits.kill_grace_ms / 1000
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self._alive_members() and time.monotonic() < deadline:
            await self._reaper.wait_any_exit(min(0.25, deadline - time.monotonic()))
        if self._alive_members():
            self._signal_all(signal.SIGKILL)
            deadline = time.monotonic() + 2.0
            while self._alive_members() and time.monotonic() < deadline:
                await self._reaper.wait_any_exit(min(0.25, deadline - time.monotonic()))
        if self.running:
            await self.wait_exit(self.limits.drain_ms / 1000 + 1.0)
        self._timeout.cancel()
        if self.ending is not None and self.ending.background:
            self.ending.background = len(self._alive_members())
        if self.group is not None and not self.running:
            self.group.remove()  # only if empty; a removed group reads as empty

    def _signal_all(self, sig: int) -> None:
        if self.group is not None:
            if sig == signal.SIGKILL:
                self.group.kill()  # one write, and nothing forked meanwhile is missed
            else:
                self.group.signal(sig)
                if sig == signal.SIGTERM:
                    self.group.signal(signal.SIGCONT)  # stopped jobs must see TERM
            return
        if self._leader_status is None:
            # The leader is not reaped yet, so its pid (the group id) cannot be reused.
            proctree.signal_group(self.pid, sig)
        found = self._find_members()
        known = {(m.pid, m.start) for m in found}
        self._members = found + [m for m in self._members if (m.pid, m.start) not in known]
        for member in self._members:
            proctree.signal_process(member, sig)
            if sig == signal.SIGTERM:
                proctree.signal_process(member, signal.SIGCONT)  # stopped jobs must see TERM

    def _alive_members(self) -> list[proctree.ProcInfo]:
        if self.group is not None:
            self._members = self._find_members()
            return self._members
        alive = [m for m in self._members if proctree.live_count([m])]
        fresh = self._find_members()
        seen = {(m.pid, m.start) for m in alive}
        alive += [m for m in fresh if (m.pid, m.start) not in seen]
        self._members = alive
        if self._leader_status is None and not any(m.pid == self.pid for m in alive):
            leader = proctree.read_proc(self.pid)
            if leader is not None and not leader.zombie:
                alive.append(leader)
        return alive

    def refresh_background(self) -> int:
        """Count the left-behind processes again (a poll reports the current number,
        docs/sessions.md#background-processes); 0 for a session that left none."""
        ending = self.ending
        if ending is not None and ending.background:
            ending.background = len(self._alive_members())
        return ending.background if ending is not None else 0

    def discard(self) -> None:
        """Forget the PTY (eviction or shutdown after the processes are gone)."""
        self._timeout.cancel()
        if self._drain_timer is not None:
            self._drain_timer.cancel()
        if self._event_timer is not None:
            self._event_timer.cancel()
        if not self.terminal.closed:
            self._loop.remove_reader(self.terminal.fd)
        self.terminal.close()
        self.output.close()
        if self.group is not None:
            self.group.remove()  # only if empty: left-behind jobs being killed keep it
