"""The dispatcher's in-process twin: the same validation and the same ``WorkerService`` as a
real worker, with no sockets and no worker processes, so most gateway tests run fast."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.events import WorkerEvent
from zodex_protocol.handles import SessionHandle, worker_id_for
from zodex_protocol.limits import Limits
from zodex_protocol.replies import Patched, SessionResult
from zodex_protocol.requests import ExecRequest, PatchRequest, WriteRequest
from zodex_protocol.validation import CheckedWorkdir
from zodex_worker.reaper import Reaper
from zodex_worker.service import WorkerConfig, WorkerService


class InProcessDispatcher:
    """Same contract, served by WorkerService objects living in this process (tests only)."""

    def __init__(self, limits: Limits, spill_dir: Any, shell: list[str]) -> None:
        self.limits = limits
        self._spill_dir = spill_dir
        self._shell = shell
        self._reaper = Reaper(asyncio.get_running_loop())
        self._services: dict[str, WorkerService] = {}
        self.events: list[WorkerEvent] = []

    def _service(self, real: str) -> WorkerService:
        worker_id = worker_id_for(real)
        if worker_id not in self._services:
            config = WorkerConfig(
                worker_id=worker_id,
                incarnation=1,
                workdir=real,
                spill_dir=self._spill_dir,
                shell=self._shell,
                limits=self.limits,
            )
            self._services[worker_id] = WorkerService(config, self._reaper, self.events.append)
        return self._services[worker_id]

    async def exec_command(
        self,
        args: Mapping[str, Any],
        *,
        tag: str | None = None,
        progress: Any = None,
        workdir: CheckedWorkdir | None = None,
    ) -> SessionResult:
        request = ExecRequest.from_args(args, self.limits, tag=tag, workdir=workdir)
        return await self._service(request.real_workdir).exec(request)

    async def write_stdin(self, args: Mapping[str, Any], *, progress: Any = None) -> SessionResult:
        request = WriteRequest.from_args(args, self.limits)
        handle = request.session_handle
        parsed = SessionHandle.parse(handle)
        service = self._services.get(parsed.worker_id) if parsed else None
        if service is None:
            raise ProtocolError(ErrorCode.UNKNOWN_HANDLE, f"Unknown session handle: {handle}")
        return await service.write(request)

    async def apply_patch(self, args: Mapping[str, Any], *, workdir: CheckedWorkdir | None = None) -> Patched:
        request = PatchRequest.from_args(args, self.limits, workdir=workdir)
        return await self._service(request.real_workdir).patch(request)

    async def close(self) -> None:
        for service in self._services.values():
            await service.shutdown()
        self._reaper.close()
