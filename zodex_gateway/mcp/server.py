"""The MCP server: tool listing and tool calls, turned into results a model can act on.

Errors never escape as exceptions (the SDK would hide them behind a generic message):
every refusal becomes a tool result with ``isError`` and one clear line.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from zodex_gateway.agents.alias import clean_alias
from zodex_gateway.agents.identity import KnownAgents, identity_key
from zodex_gateway.config.package_version import zodex_version
from zodex_gateway.context import ContextProvider, attach
from zodex_gateway.history import AgentRecord, FileChange, HistoryStore, HistoryUnavailable
from zodex_gateway.mcp import tools
from zodex_gateway.mcp.call_log import CallLog, CallNote
from zodex_gateway.mcp.instructions import SERVER_NAME, instructions, sprite_instructions
from zodex_gateway.redaction import SECRETS, SecretRegistry, SessionResults
from zodex_gateway.workers.dispatcher import Dispatcher
from zodex_protocol.errors import ProtocolError
from zodex_protocol.limits import Limits
from zodex_protocol.replies import Patched

log = logging.getLogger("zodex.gateway")

# set_agent_alias without an identity: how to get one (docs/tools.md#set_agent_alias).
NO_IDENTITY = (
    "set_agent_alias needs to know which conversation is calling, and this call carries no agent "
    "identity (no openai/session metadata and no MCP session); nothing was changed. To get one, "
    "connect through the stdio bridge `zodex local connect`, or over HTTP send initialize and then "
    "the Mcp-Session-Id header it answers with on every call"
)


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(text=text)]


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=_text(message), is_error=True)


def session_result(result: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=_text(json.dumps(result, ensure_ascii=False)), structured_content=result
    )


def patch_result(patched: Patched) -> types.CallToolResult:
    return types.CallToolResult(content=_text(patched.text), is_error=not patched.ok)


class CallWatcher(Protocol):
    """Hears about recorded calls and agents (the observer's event feed)."""

    def agent_seen(self, agent: AgentRecord) -> None: ...

    def agent_updated(self, agent: AgentRecord) -> None: ...

    def call_started(self, invocation_id: str) -> None: ...

    def call_completed(self, invocation_id: str) -> None: ...


@dataclass
class LocalFeatures:
    """What Local mode adds around the tools: agents and history, model context, viewers."""

    history: HistoryStore | None = None
    context: ContextProvider | None = None
    stdio_connection: str | None = None  # the identity of a stdio gateway's one connection
    watchers: list[CallWatcher] = field(default_factory=list)
    # Redacted from what history stores; the model's results are not (docs/security.md#redaction).
    secrets: SecretRegistry = SECRETS


@dataclass
class Outcome:
    """One dispatched call: what the model gets, and what history records (no context)."""

    result: types.CallToolResult
    recorded: Any
    created_handle: str | None = None
    files: tuple[FileChange, ...] = ()


# A dispatched tool: its arguments and the call's history id (None when not recorded).
ToolHandler = Callable[[dict[str, Any], str | None], Awaitable[Outcome]]
# A tool the gateway answers itself: the calling agent and the arguments.
GatewayTool = Callable[[AgentRecord | None, dict[str, Any]], types.CallToolResult]


class ToolHandlers:
    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        limits: Limits | None = None,
        read_only_hint: bool = True,
        mode: str = "local",
        local: LocalFeatures | None = None,
    ) -> None:
        """``limits``: the effective ones, which the tool descriptions state."""
        self.dispatcher = dispatcher
        self.mode = mode
        self.local = local or LocalFeatures()
        self._agents: KnownAgents[AgentRecord] = KnownAgents()
        self._results = SessionResults(self.local.secrets)
        self._call_log = CallLog()
        self._tools = tools.tool_list(
            limits or Limits(), read_only_hint=read_only_hint, with_alias=mode == "local"
        )
        self._input_schemas = {tool.name: tool.input_schema for tool in self._tools}
        # One named handler per tool, as the worker has one per message type.
        self._dispatched: dict[str, ToolHandler] = {
            tools.EXEC_COMMAND: self._exec_command,
            tools.WRITE_STDIN: self._write_stdin,
            tools.APPLY_PATCH: self._apply_patch,
        }
        # Answered by the gateway, never recorded as calls: Local's only.
        self._gateway_tools: dict[str, GatewayTool] = (
            {tools.SET_AGENT_ALIAS: self._set_alias} if mode == "local" else {}
        )

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
        return await self.call(params, ctx.meta, ctx.request)

    async def call(
        self, params: types.CallToolRequestParams, meta: Any, request: Any
    ) -> types.CallToolResult:
        """One tool call; ``meta``: the request's ``_meta``; ``request``: the HTTP request
        (None over stdio). Both only say who is calling (docs/agents.md#identity)."""
        # One line in the log per call, whichever way it ends (docs/modes.md#logs).
        note = CallNote()
        try:
            result = await self._call_tool(meta, request, params, note)
        except Exception as exc:
            self._call_log.completed(
                params.name,
                params.arguments or {},
                error_result(f"internal error ({type(exc).__name__})"),
                note,
            )
            raise
        self._call_log.completed(params.name, params.arguments or {}, result, note)
        return result

    async def _call_tool(
        self, meta: Any, request: Any, params: types.CallToolRequestParams, note: CallNote
    ) -> types.CallToolResult:
        args = params.arguments or {}
        history = self.local.history
        stop = _stop_kind(params.name, args)
        try:
            agent = self._agent(meta, request)
        except HistoryUnavailable as exc:
            if stop is None:
                return error_result(str(exc))
            agent = None  # a stop is carried out, unattributed (docs/history.md#recording)
        if agent is not None:
            note.agent_id, note.alias = agent.agent_id, agent.alias
        gateway_tool = self._gateway_tools.get(params.name)
        if gateway_tool is not None:
            return gateway_tool(agent, args)
        declared, real = _workdirs(args)
        target = args.get("session_handle") if params.name == tools.WRITE_STDIN else None
        invocation = None
        if history is not None:
            try:
                known = self.local.secrets.snapshot()  # one look at the secret files per write
                invocation = history.begin(
                    agent_id=agent.agent_id if agent else None,
                    tool_name=params.name,
                    args=known.value(args),
                    declared_workdir=known.value(declared),
                    real_workdir=known.value(real),
                    session_handle=target if isinstance(target, str) else None,
                )
            except HistoryUnavailable as exc:
                if stop is None:
                    return error_result(str(exc))  # nothing runs unrecorded
                # Stopping a command must never depend on the disk: carry it out, say so.
                log.warning(
                    "write_stdin %s for session %s carried out but not recorded in history: %s",
                    stop, _loggable(target), exc.cause,
                )  # fmt: skip
            if invocation is not None:
                for watcher in self.local.watchers:
                    watcher.call_started(invocation)
        outcome = await self._dispatch(params.name, args, invocation)
        note.created_handle = outcome.created_handle
        ok = not outcome.result.is_error
        if history is not None and invocation is not None:
            try:
                known = self.local.secrets.snapshot()
                session = outcome.created_handle or (target if isinstance(target, str) else None)
                history.complete(
                    invocation,
                    ok=ok,
                    result=self._results.redact(session, outcome.recorded, known),
                    error=None if ok else known.text(_text_of(outcome.result)),
                    session_handle=outcome.created_handle,
                    files=known.value(outcome.files),
                )
            except HistoryUnavailable as exc:
                log.error("history could not complete %s: %s", invocation, exc)
            for watcher in self.local.watchers:
                watcher.call_completed(invocation)
        return self._with_context(outcome.result, agent, real, ok)

    async def _dispatch(self, name: str, args: dict[str, Any], invocation: str | None) -> Outcome:
        handler = self._dispatched.get(name)
        try:
            if handler is not None:
                return await handler(args, invocation)
            message = f"Unknown tool: {name}"
        except ProtocolError as exc:
            if not exc.is_tool_level:
                log.warning("%s failed at the protocol level: %r", name, exc)
            message = exc.message
        except TimeoutError:
            message = f"{name} got no answer from its worker in time; try again"
        return Outcome(error_result(message), message)

    async def _exec_command(self, args: dict[str, Any], invocation: str | None) -> Outcome:
        # The worker echoes the tag in process_started: live output is tied to this call
        # before the call returns. A model's own "_tag" is not an argument: never passed on.
        result = await self.dispatcher.exec_command(args, tag=invocation)
        fields = result.fields()
        # The session this call created: running (its handle is in the result) or already
        # ended (the worker names it in a wire-only field the model does not get).
        return Outcome(session_result(fields), fields, result.session or result.session_handle)

    async def _write_stdin(self, args: dict[str, Any], _invocation: str | None) -> Outcome:
        fields = (await self.dispatcher.write_stdin(args)).fields()
        return Outcome(session_result(fields), fields)

    async def _apply_patch(self, args: dict[str, Any], _invocation: str | None) -> Outcome:
        patched = await self.dispatcher.apply_patch(args)
        files = tuple(
            FileChange(f.operation, f.path, f.old_path, f.added, f.removed, f.diff) for f in patched.files
        )
        return Outcome(patch_result(patched), patched.text, files=files)

    def _agent(self, meta: Any, request: Any) -> AgentRecord | None:
        if self.local.history is None:
            return None
        key = identity_key(meta, request, self.local.stdio_connection)
        if key is None:
            return None
        # An identity's agent id never changes: look it up (a write) once while it is among
        # the identities this gateway met lately (KnownAgents);
        # each recorded call refreshes the agent's last_seen itself.
        agent = self._agents.get(key)
        if agent is None:
            agent = self.local.history.agent_for(key)
            self._agents.put(key, agent)
            for watcher in self.local.watchers:
                watcher.agent_seen(agent)
        return agent

    def _set_alias(self, agent: AgentRecord | None, args: dict[str, Any]) -> types.CallToolResult:
        history = self.local.history
        if history is None or agent is None:
            return error_result(NO_IDENTITY)
        try:
            alias = clean_alias(args.get("alias"))
        except ProtocolError as exc:
            return error_result(exc.message)
        if alias is not None:
            alias = self.local.secrets.redact(alias)  # viewers read it
        try:
            updated = history.set_alias(agent.agent_id, alias)
        except HistoryUnavailable as exc:
            return error_result(str(exc))
        for watcher in self.local.watchers:
            watcher.agent_updated(updated)
        data = {"agent_id": updated.agent_id, "alias": updated.alias or ""}
        line = (
            f"Agent {updated.agent_id} is now labelled {updated.alias!r}."
            if updated.alias
            else f"Agent {updated.agent_id} has no label now."
        )
        result = types.CallToolResult(content=_text(line), structured_content=data)
        return self._with_context(result, agent, None, True)

    def _with_context(
        self, result: types.CallToolResult, agent: AgentRecord | None, real_workdir: str | None, ok: bool
    ) -> types.CallToolResult:
        provider = self.local.context
        if provider is None or agent is None:
            return result
        context = provider.for_call(agent.agent_id, real_workdir if ok else None, success=ok)
        if context is None:
            return result
        if isinstance(result.structured_content, dict) and not result.is_error:
            structured = {**result.structured_content, "zodex_context": context.data}
            if _text_of(result) == json.dumps(result.structured_content, ensure_ascii=False):
                text = json.dumps(structured, ensure_ascii=False)
            else:
                text = attach(_text_of(result), context)
            return types.CallToolResult(content=_text(text), structured_content=structured)
        return types.CallToolResult(
            content=_text(attach(_text_of(result), context)),
            structured_content=result.structured_content,
            is_error=result.is_error,
        )


# Characters that stop a command when typed: Ctrl-C, Ctrl-D, Ctrl-\.
_STOP_CHARS = {"\u0003": "Ctrl-C", "\u0004": "Ctrl-D", "\u001c": "Ctrl-\\"}


def _stop_kind(name: str, args: dict[str, Any]) -> str | None:
    """How a write_stdin call stops its command (``kill_process`` or the control character
    typed), or None for any other call."""
    if name != tools.WRITE_STDIN:
        return None
    if args.get("kill_process") is True:
        return "kill_process"
    chars = args.get("chars")
    if isinstance(chars, str):
        for char, label in _STOP_CHARS.items():
            if char in chars:
                return label
    return None


def _loggable(value: Any) -> str:
    # A handle is model input: one line in the log whatever it holds.
    return json.dumps(value, ensure_ascii=True)[:200]


def _text_of(result: types.CallToolResult) -> str:
    block = result.content[0] if result.content else None
    return block.text if isinstance(block, types.TextContent) else ""


def _workdirs(args: dict[str, Any]) -> tuple[str | None, str | None]:
    """The workdir as given, and its real path when it names an existing directory."""
    declared = args.get("workdir")
    if not isinstance(declared, str):
        return None, None
    real = os.path.realpath(declared) if os.path.isabs(declared) and os.path.isdir(declared) else None
    return declared, real


def server_for(handlers: ToolHandlers, *, start_directory: str | None = None) -> Server[Any]:
    """The SDK's server around ``handlers``: listing, calls and the instructions of its mode."""
    mode = handlers.mode
    return Server(
        SERVER_NAME,
        version=zodex_version(),
        instructions=sprite_instructions(start_directory)
        if mode == "sprite"
        else instructions(start_directory),
        get_tool_input_schema=handlers.input_schema,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
    )
