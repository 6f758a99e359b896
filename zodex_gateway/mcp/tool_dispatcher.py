"""The tool calls of one gateway, from the SDK's ``tools/list`` and ``tools/call`` handlers
to the tool that answers: the tool table of the gateway's mode, who is calling, the call
recorded around the tool, and model context on its result.

Every call comes through :meth:`ToolDispatcher.call_tool` with the SDK's request context,
which reaches the handler in :class:`ToolCall`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from zodex_gateway.history import AgentRecord, HistoryUnavailable
from zodex_gateway.mcp import tools
from zodex_gateway.mcp.after_answer import after_answer
from zodex_gateway.mcp.alias_tool import set_agent_alias
from zodex_gateway.mcp.call_log import CallNote
from zodex_gateway.mcp.call_recorder import CallRecorder
from zodex_gateway.mcp.calls import CANCELLED, Outcome, ToolCall, error_result
from zodex_gateway.mcp.context_attacher import ContextAttacher
from zodex_gateway.mcp.local_features import LocalFeatures
from zodex_gateway.mcp.mode import Mode
from zodex_gateway.mcp.worker_tools import WorkerTools
from zodex_gateway.workers.dispatcher import Dispatcher
from zodex_protocol.limits import Limits
from zodex_protocol.validation import CheckedWorkdir

# A tool the gateway answers itself: the calling agent and the arguments.
GatewayTool = Callable[[AgentRecord | None, dict[str, Any]], types.CallToolResult]


class ToolDispatcher:
    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        limits: Limits | None = None,
        read_only_hint: bool = True,
        mode: Mode = Mode.LOCAL,
        local: LocalFeatures | None = None,
    ) -> None:
        """``limits``: the effective ones, which the tool descriptions state."""
        self.mode = mode
        local = local or LocalFeatures()
        self.workers = WorkerTools(dispatcher, progress_every_ms=(limits or Limits()).progress_interval_ms)
        self._recorder = CallRecorder(local)
        self._context = ContextAttacher(local.context)
        self._tools = tools.tool_list(
            limits or Limits(), read_only_hint=read_only_hint, with_alias=mode.labels_agents
        )
        self._input_schemas = {tool.name: tool.input_schema for tool in self._tools}
        # Answered by the gateway, never recorded as calls.
        self._gateway_tools: dict[str, GatewayTool] = {}
        if mode.labels_agents:
            self._gateway_tools[tools.SET_AGENT_ALIAS] = self._set_agent_alias

    async def list_tools(
        self, _ctx: ServerRequestContext[Any] | None, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tools)

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        """A listed tool's input schema, for the SDK's check of ``Mcp-Param-*`` headers over
        HTTP. Without it the SDK runs a whole ``tools/list`` for every call to find the
        schema (docs/benchmarks.md#where-the-time-goes); every caller is listed the same tools."""
        return self._input_schemas.get(name)

    async def call_tool(
        self, ctx: ServerRequestContext[Any] | None, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """The SDK's ``tools/call`` handler."""
        if ctx is None:
            return await self.call(params, None, None)
        return await self.call(params, ctx.meta, ctx.request, ctx=ctx)

    async def call(
        self,
        params: types.CallToolRequestParams,
        meta: Any,
        request: Any,
        *,
        ctx: ServerRequestContext[Any] | None = None,
    ) -> types.CallToolResult:
        """One tool call; ``meta``: the request's ``_meta``; ``request``: the HTTP request
        (None over stdio). Both only say who is calling (docs/agents.md#identity)."""
        call = ToolCall(params.name, params.arguments or {}, ctx=ctx)
        # One line in the log per call, whichever way it ends (docs/modes.md#logs).
        note = CallNote()
        try:
            result = await self._call(call, meta, request, note)
        except asyncio.CancelledError:  # its client cancelled it (docs/tools.md#progress-and-cancellation)
            self._recorder.logged(call, error_result(CANCELLED), note)
            raise
        except Exception as exc:
            self._recorder.logged(call, error_result(f"internal error ({type(exc).__name__})"), note)
            raise
        self._recorder.logged(call, result, note)
        return result

    async def _call(self, call: ToolCall, meta: Any, request: Any, note: CallNote) -> types.CallToolResult:
        try:
            agent = self._recorder.caller(call, meta, request)
        except HistoryUnavailable as exc:
            return error_result(str(exc))
        if agent is not None:
            note.agent_id, note.alias = agent.agent_id, agent.alias
        gateway_tool = self._gateway_tools.get(call.name)
        if gateway_tool is not None:
            result = gateway_tool(agent, call.args)
            return result if result.is_error else self._context.attached(result, agent, None, True)
        workdir = _workdir(call.args)
        declared, real = (None, None) if workdir is None else (workdir.given, workdir.real)
        try:
            invocation = self._recorder.begin(call, agent, declared, real)
        except HistoryUnavailable as exc:
            return error_result(str(exc))
        call = dataclasses.replace(call, invocation=invocation, workdir=workdir)
        try:
            outcome = await self.workers.run(call)
        except asyncio.CancelledError:
            # Completed, so history does not show it running forever.
            tell_viewers = self._recorder.complete(call, Outcome(error_result(CANCELLED), CANCELLED))
            if tell_viewers is not None:
                tell_viewers()
            raise
        note.created_handle = outcome.created_handle
        # Completed before the answer: whoever holds the answer finds the call completed in
        # history, from any process. Viewers are told once the answer is on its way.
        tell_viewers = self._recorder.complete(call, outcome)
        if tell_viewers is not None:
            after_answer(tell_viewers, in_request_task=call.ctx is not None)
        return self._context.attached(outcome.result, agent, real, not outcome.result.is_error)

    def _set_agent_alias(self, agent: AgentRecord | None, args: dict[str, Any]) -> types.CallToolResult:
        return set_agent_alias(self._recorder, agent, args)


def _workdir(args: dict[str, Any]) -> CheckedWorkdir | None:
    """The workdir as given, checked: its real path when it names an existing directory.
    The request to the worker takes the same check (one real path per call)."""
    declared = args.get("workdir")
    return CheckedWorkdir.check(declared) if isinstance(declared, str) else None
