"""The seam between the MCP tools and the workers.

:class:`ZmqDispatcher` validates, then routes over ZeroMQ through the supervisor. Its
twin for unit tests, with no sockets and no worker processes, is
``tests.support.in_process.InProcessDispatcher``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from zodex_gateway.workers.supervisor import Supervisor, lost_message
from zodex_protocol import messages
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.replies import Patched, SessionResult
from zodex_protocol.requests import ExecRequest, PatchRequest, WriteRequest

# A reply can take the longest yield, plus a kill's grace, plus slack for a busy machine.
REQUEST_SLACK_S = 30.0


class Dispatcher(Protocol):
    """Takes a tool call's arguments (checked here, by docs/tools.md#argument-rules) and
    returns the worker's typed reply. ``tag`` is the call's history id, echoed in the
    command's ``process_started``."""

    async def exec_command(self, args: Mapping[str, Any], *, tag: str | None = None) -> SessionResult: ...

    async def write_stdin(self, args: Mapping[str, Any]) -> SessionResult: ...

    async def apply_patch(self, args: Mapping[str, Any]) -> Patched: ...

    async def close(self) -> None: ...


class ZmqDispatcher:
    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.limits = supervisor.runtime.limits
        self._timeout = (self.limits.yield_max_ms + self.limits.kill_grace_ms) / 1000 + REQUEST_SLACK_S

    async def exec_command(self, args: Mapping[str, Any], *, tag: str | None = None) -> SessionResult:
        request = ExecRequest.from_args(args, self.limits, tag=tag)
        real = request.real_workdir
        client = await self.supervisor.worker_for(real)
        try:
            body = await client.request(messages.EXEC, request.to_body(), self._timeout)
        except ProtocolError as exc:
            if exc.code != ErrorCode.WORKER_LOST:
                raise
            raise ProtocolError(
                ErrorCode.SESSION_LOST,
                f"the worker for {real} exited unexpectedly while running the command; start the command again",
            ) from exc
        return SessionResult.from_body(body)

    async def write_stdin(self, args: Mapping[str, Any]) -> SessionResult:
        request = WriteRequest.from_args(args, self.limits)
        handle = request.session_handle
        target = await self.supervisor.route_handle(handle)
        if isinstance(target, SessionResult):
            return target  # from the tombstone of an incarnation that exited cleanly
        try:
            body = await target.request(messages.WRITE, request.to_body(), self._timeout)
        except ProtocolError as exc:
            if exc.code != ErrorCode.WORKER_LOST:
                raise
            raise ProtocolError(ErrorCode.SESSION_LOST, lost_message(handle, target.record.workdir)) from exc
        return SessionResult.from_body(body)

    async def apply_patch(self, args: Mapping[str, Any]) -> Patched:
        request = PatchRequest.from_args(args, self.limits)
        real = request.real_workdir
        client = await self.supervisor.worker_for(real)
        try:
            body = await client.request(messages.PATCH, request.to_body(), self._timeout)
        except ProtocolError as exc:
            if exc.code != ErrorCode.WORKER_LOST:
                raise
            raise ProtocolError(
                ErrorCode.SESSION_LOST,
                f"the worker for {real} exited unexpectedly while applying the patch; "
                "check the files and apply it again",
            ) from exc
        return Patched.from_body(body)

    async def close(self) -> None:
        await self.supervisor.shutdown()
