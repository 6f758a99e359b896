"""The dispatcher's in-process twin: the same validation and the same ``WorkerService`` as a
real worker, with no sockets and no worker processes, so most gateway tests run fast."""

from __future__ import annotations

import asyncio
from typing import Any

from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import SessionHandle, worker_id_for
from zodex_protocol.limits import Limits
from zodex_protocol.validation import check_exec_args, check_patch_args, check_write_args
from zodex_worker.reaper import Reaper
from zodex_worker.service import WorkerConfig, WorkerService


class InProcessDispatcher:
    """Same contract, served by WorkerService objects living in this process (tests only)."""

    def __init__(self, limits: Limits, spill_dir: Any, shell: list[str]) -> None:
        self.limits = limits
        self._spill_dir = spill_dir
        self._shell = shell
        self._reaper = Reaper(asyncio.get_running_loop())
        self._services: dict[str, Any] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _service(self, real: str) -> Any:
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
            self._services[worker_id] = WorkerService(
                config, self._reaper, lambda t, b: self.events.append((t, b))
            )
        return self._services[worker_id]

    async def exec_command(self, args: dict[str, Any]) -> dict[str, Any]:
        real = check_exec_args(args, self.limits)
        result: dict[str, Any] = await self._service(real).exec(args)
        return result

    async def write_stdin(self, args: dict[str, Any]) -> dict[str, Any]:
        handle = check_write_args(args, self.limits)
        parsed = SessionHandle.parse(handle)
        service = self._services.get(parsed.worker_id) if parsed else None
        if service is None:
            raise ProtocolError(ErrorCode.UNKNOWN_HANDLE, f"Unknown session handle: {handle}")
        result: dict[str, Any] = await service.write(args)
        return result

    async def apply_patch(self, args: dict[str, Any]) -> dict[str, Any]:
        real = check_patch_args(args, self.limits)
        result: dict[str, Any] = await self._service(real).patch(args)
        return result

    async def close(self) -> None:
        for service in self._services.values():
            await service.shutdown()
        self._reaper.close()
