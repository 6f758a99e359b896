"""How workers end, as the supervisor accounts for them: which it started, which it ended on
purpose (and why), which deaths count as crashes — the restart policies those feed — and the
log line each end gets. No process is touched here; the supervisor acts on the answers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from zodex_gateway.workers.restart_policy import RestartPolicy
from zodex_protocol.layout import RuntimeLayout, WorkerRecord

log = logging.getLogger("zodex.gateway")

Incarnation = tuple[str, int]  # (worker id, incarnation)


class WorkerEnds:
    def __init__(self, layout: RuntimeLayout, stopping: Callable[[], bool]) -> None:
        self.layout = layout
        self.policies: dict[str, RestartPolicy] = {}
        self._stopping = stopping
        self._counted_crashes: set[Incarnation] = set()
        self._abandoned: set[Incarnation] = set()  # ended by us: not crashes
        self._spawned: set[Incarnation] = set()  # started by us: log_exit logs their end
        self._kill_reasons: dict[Incarnation, str] = {}  # why we killed one, for the log

    def policy(self, worker_id: str) -> RestartPolicy:
        return self.policies.setdefault(worker_id, RestartPolicy())

    def started(self, key: Incarnation) -> None:
        """This gateway started it and saw it ready."""
        self._spawned.add(key)

    def killing(self, key: Incarnation, reason: str) -> None:
        """This gateway is about to kill it, because ``reason``."""
        self._kill_reasons[key] = reason

    def abandoned(self, key: Incarnation) -> None:
        """This gateway ends it on purpose: its end is no crash."""
        self._abandoned.add(key)

    def failed_start(self, key: Incarnation, workdir: str, policy: RestartPolicy) -> None:
        self._count_crash(key[0], workdir, policy)
        self._counted_crashes.add(key)

    def unclean_end(self, record: WorkerRecord) -> bool:
        """A worker seen dead: counted as a crash unless it left its clean-exit file or was
        ended by us. True the first time an end without that file is seen: its sessions
        are lost, and what they left running is the caller's to end."""
        key = (record.worker_id, record.incarnation)
        if key in self._counted_crashes or self.layout.exit_file(*key).exists():
            return False
        self._counted_crashes.add(key)
        if key not in self._abandoned:
            self._count_crash(record.worker_id, record.workdir)
            if key not in self._spawned:  # ours are logged with their exit status (log_exit)
                log.warning(
                    "worker for %s (pid %d, incarnation %d), started by another gateway, exited "
                    "unexpectedly; its sessions are lost",
                    record.workdir, record.pid, record.incarnation,
                )  # fmt: skip
        return True

    def log_exit(self, key: Incarnation, workdir: str, pid: int, waited: asyncio.Future[int]) -> None:
        """How a worker this gateway started ended, with its exit status or signal."""
        if waited.cancelled() or waited.exception() is not None:
            return
        how = exit_reason(waited.result())
        which = f"worker for {workdir} (pid {pid}, incarnation {key[1]})"
        if key not in self._spawned:
            log.error("%s failed to start: %s", which, how)
        elif self.layout.exit_file(*key).exists():
            log.info("%s exited cleanly (%s)", which, how)
        elif key in self._kill_reasons:
            log.warning("%s was killed because %s (%s)", which, self._kill_reasons.pop(key), how)
        elif self._stopping():
            log.info("%s stopped with the gateway (%s)", which, how)
        else:
            log.error("%s crashed: %s; its sessions are lost", which, how)

    def _count_crash(self, worker_id: str, workdir: str, policy: RestartPolicy | None = None) -> None:
        policy = policy or self.policy(worker_id)
        had_given_up = policy.gave_up()
        policy.record_crash()
        if not had_given_up and policy.gave_up():
            log.error(
                "the worker for %s crashed %d times in %.0fs; not restarting it until %.0fs pass "
                "without a crash (tool calls there fail until then)",
                workdir, policy.recent_crashes(), policy.window_s, policy.window_s,
            )  # fmt: skip


def exit_reason(returncode: int) -> str:
    """A child's end as an operator reads it: ``exit status N`` or ``killed by SIGNAME``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
