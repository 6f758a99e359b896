"""The seam between the MCP tools and the workers.

:class:`ZmqDispatcher` validates, then routes over ZeroMQ through the supervisor.
:class:`InProcessDispatcher` is its twin for unit tests: the same validation and the same
:class:`~zodex_worker.service.WorkerService`, with no sockets and no worker processes.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from zodex_gateway.supervisor import Supervisor, lost_message
from zodex_protocol import messages
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import SessionHandle, worker_id_for
from zodex_protocol.limits import Limits
from zodex_worker.validation import check_exec_args, check_patch_args, check_write_args

# A reply can take the longest yield, plus a kill's grace, plus slack for a busy machine.
REQUEST_SLACK_S = 30.0


class Dispatcher(Protocol):
    async def exec_command(self, args: dict[str, Any]) -> dict[str, Any]: ...

    async def write_stdin(self, args: dict[str, Any]) -> dict[str, Any]: ...

    async def apply_patch(self, args: dict[str, Any]) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class ZmqDispatcher:
    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.limits = supervisor.runtime.limits
        self._timeout = (self.limits.yield_max_ms + self.limits.kill_grace_ms) / 1000 + REQUEST_SLACK_S

    async def exec_command(self, args: dict[str, Any]) -> dict[str, Any]:
        real = check_exec_args(args, self.limits)
        client = await self.supervisor.worker_for(real)
        try:
            result: dict[str, Any] = await client.request(messages.EXEC, args, self._timeout)
        except ProtocolError as exc:
            if exc.code != ErrorCode.WORKER_LOST:
                raise
            raise ProtocolError(
                ErrorCode.SESSION_LOST,
                f"the worker for {real} exited unexpectedly while running the command; start the command again",
            ) from exc
        return result

    async def write_stdin(self, args: dict[str, Any]) -> dict[str, Any]:
        handle = check_write_args(args, self.limits)
        target = await self.supervisor.route_handle(handle)
        if isinstance(target, dict):
            return target
        try:
            result: dict[str, Any] = await target.request(messages.WRITE, args, self._timeout)
        except ProtocolError as exc:
            if exc.code != ErrorCode.WORKER_LOST:
                raise
            raise ProtocolError(ErrorCode.SESSION_LOST, lost_message(handle, target.record.workdir)) from exc
        return result

    async def apply_patch(self, args: dict[str, Any]) -> dict[str, Any]:
        real = check_patch_args(args, self.limits)
        client = await self.supervisor.worker_for(real)
        try:
            result: dict[str, Any] = await client.request(messages.PATCH, args, self._timeout)
        except ProtocolError as exc:
            if exc.code != ErrorCode.WORKER_LOST:
                raise
            raise ProtocolError(
                ErrorCode.SESSION_LOST,
                f"the worker for {real} exited unexpectedly while applying the patch; "
                "check the files and apply it again",
            ) from exc
        return result

    async def close(self) -> None:
        await self.supervisor.shutdown()


class InProcessDispatcher:
    """Same contract, served by WorkerService objects living in this process (tests only)."""

    def __init__(self, limits: Limits, spill_dir: Any, shell: list[str]) -> None:
        from zodex_worker.reaper import Reaper

        self.limits = limits
        self._spill_dir = spill_dir
        self._shell = shell
        self._reaper = Reaper(asyncio.get_running_loop())
        self._services: dict[str, Any] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _service(self, real: str) -> Any:
        from zodex_worker.service import WorkerConfig, WorkerService

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
