"""The tools a worker answers — ``exec_command``, ``write_stdin``, ``apply_patch`` — one
named handler each, sent through the workers' dispatcher. A worker's refusal, a lost
worker or no answer in time is a tool error the model can act on."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from zodex_gateway.history import FileChange
from zodex_gateway.mcp import tools
from zodex_gateway.mcp.calls import Outcome, ToolCall, error_result, patch_result, session_result
from zodex_gateway.workers.dispatcher import Dispatcher
from zodex_protocol.errors import ProtocolError

log = logging.getLogger("zodex.gateway")

ToolHandler = Callable[[ToolCall], Awaitable[Outcome]]


class WorkerTools:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
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
        result = await self.dispatcher.exec_command(call.args, tag=call.invocation)
        fields = result.fields()
        # The session this call created: running (its handle is in the result) or already
        # ended (the worker names it in a wire-only field the model does not get).
        return Outcome(session_result(fields), fields, result.session or result.session_handle)

    async def _write_stdin(self, call: ToolCall) -> Outcome:
        fields = (await self.dispatcher.write_stdin(call.args)).fields()
        return Outcome(session_result(fields), fields)

    async def _apply_patch(self, call: ToolCall) -> Outcome:
        patched = await self.dispatcher.apply_patch(call.args)
        files = tuple(
            FileChange(f.operation, f.path, f.old_path, f.added, f.removed, f.diff) for f in patched.files
        )
        return Outcome(patch_result(patched), patched.text, files=files)
