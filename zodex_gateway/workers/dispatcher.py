"""The seam between the MCP tools and the workers.

:class:`ZmqDispatcher` validates, then routes over ZeroMQ through the supervisor. Its
twin for unit tests, with no sockets and no worker processes, is
``tests.support.in_process.InProcessDispatcher``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from zodex_gateway.workers.supervisor import Supervisor, lost_message
from zodex_gateway.workers.worker_client import ProgressListener, WorkerClient
from zodex_protocol import messages
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.replies import Patched, SessionResult
from zodex_protocol.requests import ExecRequest, PatchRequest, WriteRequest
from zodex_protocol.validation import CheckedWorkdir
from zodex_protocol.wait_pattern import EXITED

# A reply can take the longest yield, plus a kill's grace, plus slack for a busy machine.
REQUEST_SLACK_S = 30.0


class Dispatcher(Protocol):
    """Takes a tool call's arguments (checked here, by docs/tools.md#argument-rules) and
    returns the worker's typed reply. ``tag`` is the call's history id, echoed in the
    command's ``process_started``; ``workdir`` the check of the call's workdir the caller
    already made, which a dispatcher checking the arguments takes instead of its own."""

    async def exec_command(
        self,
        args: Mapping[str, Any],
        *,
        tag: str | None = None,
        progress: ProgressListener | None = None,
        workdir: CheckedWorkdir | None = None,
    ) -> SessionResult: ...

    async def write_stdin(
        self, args: Mapping[str, Any], *, progress: ProgressListener | None = None
    ) -> SessionResult: ...

    async def apply_patch(
        self, args: Mapping[str, Any], *, workdir: CheckedWorkdir | None = None
    ) -> Patched: ...

    async def close(self) -> None: ...


class ZmqDispatcher:
    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.limits = supervisor.runtime.limits
        self._timeout = (self.limits.yield_max_ms + self.limits.kill_grace_ms) / 1000 + REQUEST_SLACK_S

    async def exec_command(
        self,
        args: Mapping[str, Any],
        *,
        tag: str | None = None,
        progress: ProgressListener | None = None,
        workdir: CheckedWorkdir | None = None,
    ) -> SessionResult:
        request = ExecRequest.from_args(args, self.limits, tag=tag, workdir=workdir)
        real = request.real_workdir
        client = await self.supervisor.worker_for(real)
        lost = f"the worker for {real} exited unexpectedly while running the command; start the command again"
        return SessionResult.from_body(
            await self._ask(client, messages.EXEC, request.to_body(), lost, progress)
        )

    async def write_stdin(
        self, args: Mapping[str, Any], *, progress: ProgressListener | None = None
    ) -> SessionResult:
        request = WriteRequest.from_args(args, self.limits)
        handle = request.session_handle
        target = await self.supervisor.route_handle(handle)
        if isinstance(target, SessionResult):  # from the tombstone of an incarnation that exited cleanly
            return target.waited(EXITED if request.wait_for is not None else None)
        lost = lost_message(handle, target.record.workdir)
        return SessionResult.from_body(
            await self._ask(target, messages.WRITE, request.to_body(), lost, progress)
        )

    async def apply_patch(self, args: Mapping[str, Any], *, workdir: CheckedWorkdir | None = None) -> Patched:
        request = PatchRequest.from_args(args, self.limits, workdir=workdir)
        real = request.real_workdir
        client = await self.supervisor.worker_for(real)
        lost = (
            f"the worker for {real} exited unexpectedly while applying the patch; "
            "check the files and apply it again"
        )
        return Patched.from_body(await self._ask(client, messages.PATCH, request.to_body(), lost))

    async def _ask(
        self,
        client: WorkerClient,
        type: str,
        body: dict[str, Any],
        lost: str,
        progress: ProgressListener | None = None,
    ) -> Any:
        """The worker's reply body. A worker that dies before it answers took the call's
        session with it: that is SESSION_LOST, told with ``lost`` (what to do now)."""
        try:
            return await client.request(type, body, self._timeout, progress=progress)
        except ProtocolError as exc:
            if exc.code != ErrorCode.WORKER_LOST:
                raise
            raise ProtocolError(ErrorCode.SESSION_LOST, lost) from exc

    async def close(self) -> None:
        await self.supervisor.shutdown()
