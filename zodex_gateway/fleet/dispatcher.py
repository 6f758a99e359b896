"""The seam between the MCP tools and the workers.

:class:`ZmqDispatcher` validates, then routes over ZeroMQ through the supervisor. Its
twin for unit tests, with no sockets and no worker processes, is
``tests.support.in_process.InProcessDispatcher``.
"""

from __future__ import annotations

from typing import Any, Protocol

from zodex_gateway.fleet.supervisor import Supervisor, lost_message
from zodex_protocol import messages
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.validation import check_exec_args, check_patch_args, check_write_args

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
