"""How the supervisor starts and signals workers: the launcher seam.

Local starts each worker as its own child (:class:`DirectLauncher`: exactly what the
supervisor always did). Sprite starts them through a root helper, as another account, and
may signal only that account's processes (``zodex_gateway.sprite.launcher``). The
supervisor keeps its logic — the spawn lock, ``READY``, restart policy, lost sessions — and
asks the launcher for the three things that need the operating system's permission.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from zodex_gateway.workers.runtime import worker_argv
from zodex_protocol.layout import WorkerRecord
from zodex_protocol.limits import Limits
from zodex_system import descriptor_limit, proctree


@dataclass(frozen=True)
class WorkerSpec:
    """One worker to start: its workdir (a real path) and where its runtime is."""

    runtime_dir: Path
    workdir: str
    worker_id: str
    incarnation: int
    spill_dir: Path
    shell: list[str]
    limits: Limits

    def argv(self, prefix: list[str]) -> list[str]:
        return [
            *prefix,
            "--runtime-dir", str(self.runtime_dir),
            "--workdir", self.workdir,
            "--worker-id", self.worker_id,
            "--incarnation", str(self.incarnation),
            "--spill-dir", str(self.spill_dir),
            "--shell", json.dumps(self.shell),
            "--limits", json.dumps(self.limits.to_dict()),
        ]  # fmt: skip


class StartedWorker(Protocol):
    """A worker process as its starter sees it (``asyncio.subprocess.Process`` is one)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def stdout(self) -> asyncio.StreamReader | None: ...

    async def wait(self) -> int: ...


class Launcher(Protocol):
    async def spawn(self, spec: WorkerSpec) -> StartedWorker:
        """Start the worker; its stdout carries the ``READY`` line."""
        ...

    def kill_started(self, worker: StartedWorker) -> None:
        """SIGKILL a worker this launcher started and has not reaped yet."""
        ...

    def kill_record(self, record: WorkerRecord) -> None:
        """SIGKILL the process a registry record names, if it is still that process."""
        ...

    def end_orphans(self, marker: str) -> None:
        """SIGKILL every process whose environment holds an entry starting with ``marker``
        (the commands of a worker incarnation that died)."""
        ...


class DirectLauncher:
    """Workers as children of this process, under its own account (Local)."""

    async def spawn(self, spec: WorkerSpec) -> StartedWorker:
        proc = await asyncio.create_subprocess_exec(
            *spec.argv(worker_argv()),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C at the gateway's terminal is the gateway's to handle
        )
        descriptor_limit.give_back(proc.pid)  # its commands get the usual open-files limit
        return proc

    def kill_started(self, worker: StartedWorker) -> None:
        """Not ``Process.kill()``: ``Popen.send_signal`` first polls, and a poll that reaps
        the child steals its exit status from the loop's watcher (which then reports 255).
        While ``returncode`` is None the pid is ours (alive or a zombie), so it cannot have
        been reused."""
        if worker.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGKILL)

    def kill_record(self, record: WorkerRecord) -> None:
        info = proctree.read_proc(record.pid)
        if info is not None and info.start == record.pid_start:
            proctree.signal_process(info, signal.SIGKILL)

    def end_orphans(self, marker: str) -> None:
        for orphan in proctree.processes_with_env(marker):
            proctree.signal_process(orphan, signal.SIGKILL)
