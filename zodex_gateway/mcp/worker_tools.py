"""The tools a worker answers — ``exec_command``, ``write_stdin``, ``apply_patch`` — one
named handler each, sent through the workers' dispatcher. A worker's refusal, a lost
worker or no answer in time is a tool error the model can act on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from zodex_gateway.history import FileChange
from zodex_gateway.mcp import tools
from zodex_gateway.mcp.calls import Outcome, ToolCall, error_result, patch_result, session_result
from zodex_gateway.workers.dispatcher import Dispatcher
from zodex_gateway.workers.worker_client import ProgressListener
from zodex_protocol.errors import ProtocolError
from zodex_protocol.limits import Limits
from zodex_protocol.progress import ProgressNote

log = logging.getLogger("zodex.gateway")

ToolHandler = Callable[[ToolCall], Awaitable[Outcome]]


class WorkerTools:
    def __init__(
        self, dispatcher: Dispatcher, *, progress_every_ms: int = Limits().progress_interval_ms
    ) -> None:
        self.dispatcher = dispatcher
        self._progress_every_ms = progress_every_ms
        # One named handler per tool, as the worker has one per message type.
        self._handlers: dict[str, ToolHandler] = {
            tools.EXEC_COMMAND: self._exec_command,
            tools.WRITE_STDIN: self._write_stdin,
            tools.APPLY_PATCH: self._apply_patch,
        }

    async def run(self, call: ToolCall) -> Outcome:
        handler = self._handlers.get(call.name)
        try:
            if handler is not None:
                return await handler(call)
            message = f"Unknown tool: {call.name}"
        except ProtocolError as exc:
            if not exc.is_tool_level:
                log.warning("%s failed at the protocol level: %r", call.name, exc)
            message = exc.message
        except TimeoutError:
            message = f"{call.name} got no answer from its worker in time; try again"
        return Outcome(error_result(message), message)

    async def _exec_command(self, call: ToolCall) -> Outcome:
        # The worker echoes the tag in process_started: live output is tied to this call
        # before the call returns. A model's own "_tag" is not an argument: never passed on.
        result = await self.dispatcher.exec_command(
            call.args, tag=call.invocation, progress=self._progress(call), workdir=call.workdir
        )
        fields = result.fields()
        # The session this call created: running (its handle is in the result) or already
        # ended (the worker names it in a wire-only field the model does not get).
        return Outcome(session_result(fields), fields, result.session or result.session_handle)

    async def _write_stdin(self, call: ToolCall) -> Outcome:
        fields = (await self.dispatcher.write_stdin(call.args, progress=self._progress(call))).fields()
        return Outcome(session_result(fields), fields)

    def _progress(self, call: ToolCall) -> ProgressListener | None:
        """Progress notes to a client that gave a token (docs/tools.md#progress-and-cancellation)."""
        ctx = call.ctx
        if ctx is None or ctx.meta is None or ctx.meta.get("progress_token") is None:
            return None
        sending: set[asyncio.Task[None]] = set()

        def heard(note: ProgressNote) -> None:
            task = asyncio.get_running_loop().create_task(
                ctx.session.report_progress(note.elapsed_ms / 1000, message=note.message())
            )
            sending.add(task)  # held until sent
            task.add_done_callback(sending.discard)

        return ProgressListener(self._progress_every_ms, heard)

    async def _apply_patch(self, call: ToolCall) -> Outcome:
        patched = await self.dispatcher.apply_patch(call.args, workdir=call.workdir)
        files = tuple(
            FileChange(f.operation, f.path, f.old_path, f.added, f.removed, f.diff) for f in patched.files
        )
        return Outcome(patch_result(patched), patched.text, files=files)
