"""What a gateway records of its tool calls: who called (the agent of an identity, looked up
once while it is among those met lately), each call begun and completed in history with
what it holds redacted, the viewers told (of a completion once the answer is on its way),
and one line in the log per call.

Without history (Sprite, the fleet, ``--no-history``) only the log line is written. With
history, nothing runs unrecorded — except a stop: a ``write_stdin`` that kills or interrupts
its command is carried out whatever the disk says, unattributed or unrecorded if it must
be (docs/history.md#recording).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import mcp_types as types

from zodex_gateway.agents.identity import KnownAgents, identity_key
from zodex_gateway.history import AgentRecord, HistoryUnavailable
from zodex_gateway.mcp import tools
from zodex_gateway.mcp.call_log import CallLog, CallNote
from zodex_gateway.mcp.calls import Outcome, ToolCall, text_of
from zodex_gateway.mcp.local_features import LocalFeatures
from zodex_gateway.redaction import SessionResults

log = logging.getLogger("zodex.gateway")

# Characters that stop a command when typed: Ctrl-C, Ctrl-D, Ctrl-\.
_STOP_CHARS = {"\u0003": "Ctrl-C", "\u0004": "Ctrl-D", "\u001c": "Ctrl-\\"}


class CallRecorder:
    def __init__(self, local: LocalFeatures) -> None:
        self._local = local
        self._agents: KnownAgents[AgentRecord] = KnownAgents()
        self._results = SessionResults(local.secrets)
        self._call_log = CallLog()

    def caller(self, call: ToolCall, meta: Any, request: Any) -> AgentRecord | None:
        """The agent making ``call`` (None without history or identity); ``meta``: the
        request's ``_meta``, ``request``: the HTTP request (None over stdio). Raises
        HistoryUnavailable when history cannot say, unless the call is a stop."""
        history = self._local.history
        if history is None:
            return None
        key = identity_key(meta, request, self._local.stdio_connection)
        if key is None:
            return None
        # An identity's agent id never changes: look it up (a write) once while it is among
        # the identities this gateway met lately (KnownAgents);
        # each recorded call refreshes the agent's last_seen itself.
        agent = self._agents.get(key)
        if agent is None:
            try:
                agent = history.agent_for(key)
            except HistoryUnavailable:
                if stop_kind(call) is None:
                    raise
                return None  # a stop is carried out, unattributed
            self._agents.put(key, agent)
            for watcher in self._local.watchers:
                watcher.agent_seen(agent)
        return agent

    def begin(
        self,
        call: ToolCall,
        agent: AgentRecord | None,
        declared_workdir: str | None,
        real_workdir: str | None,
    ) -> str | None:
        """The call's invocation id in history (None when not recorded). Raises
        HistoryUnavailable when it cannot be recorded, unless it is a stop."""
        history = self._local.history
        if history is None:
            return None
        target = _target(call)
        try:
            known = self._local.secrets.snapshot()  # one look at the secret files per write
            invocation = history.begin(
                agent_id=agent.agent_id if agent else None,
                tool_name=call.name,
                args=known.value(call.args),
                declared_workdir=known.value(declared_workdir),
                real_workdir=known.value(real_workdir),
                session_handle=target,
            )
        except HistoryUnavailable as exc:
            stop = stop_kind(call)
            if stop is None:
                raise  # nothing runs unrecorded
            # Stopping a command must never depend on the disk: carry it out, say so.
            log.warning(
                "write_stdin %s for session %s carried out but not recorded in history: %s",
                stop, _loggable(call.args.get("session_handle")), exc.cause,
            )  # fmt: skip
            return None
        for watcher in self._local.watchers:
            watcher.call_started(invocation)
        return invocation

    def complete(self, call: ToolCall, outcome: Outcome) -> Callable[[], None] | None:
        """Records how the begun ``call`` ended (``call.invocation``), redacted. Returns what
        tells the viewers (None: nobody to tell), for the caller to run after the answer."""
        history = self._local.history
        invocation = call.invocation
        if history is None or invocation is None:
            return None
        ok = not outcome.result.is_error
        try:
            known = self._local.secrets.snapshot()
            session = outcome.created_handle or _target(call)
            history.complete(
                invocation,
                ok=ok,
                result=self._results.redact(session, outcome.recorded, known),
                error=None if ok else known.text(text_of(outcome.result)),
                session_handle=outcome.created_handle,
                files=known.value(outcome.files),
            )
        except HistoryUnavailable as exc:
            log.error("history could not complete %s: %s", invocation, exc)
        watchers = self._local.watchers

        def tell_viewers() -> None:
            for watcher in watchers:
                watcher.call_completed(invocation)

        return tell_viewers if watchers else None

    def label(self, agent: AgentRecord, alias: str | None) -> AgentRecord:
        """``agent`` labelled ``alias`` (None: no label), redacted as viewers read it.
        Raises HistoryUnavailable."""
        history = self._local.history
        if history is None:
            raise HistoryUnavailable("history is off", None)
        if alias is not None:
            alias = self._local.secrets.redact(alias)
        updated = history.set_alias(agent.agent_id, alias)
        for watcher in self._local.watchers:
            watcher.agent_updated(updated)
        return updated

    def logged(self, call: ToolCall, result: types.CallToolResult, note: CallNote) -> None:
        """The call's one line in the log (docs/modes.md#logs), its duration up to now,
        written once the answer is on its way."""
        self._call_log.completed(call.name, call.args, result, note, in_request_task=call.ctx is not None)


def stop_kind(call: ToolCall) -> str | None:
    """How a write_stdin call stops its command (``kill_process`` or the control character
    typed), or None for any other call."""
    if call.name != tools.WRITE_STDIN:
        return None
    if call.args.get("kill_process") is True:
        return "kill_process"
    chars = call.args.get("chars")
    if isinstance(chars, str):
        for char, label in _STOP_CHARS.items():
            if char in chars:
                return label
    return None


def _target(call: ToolCall) -> str | None:
    """The session a write_stdin call names."""
    target = call.args.get("session_handle") if call.name == tools.WRITE_STDIN else None
    return target if isinstance(target, str) else None


def _loggable(value: Any) -> str:
    # A handle is model input: one line in the log whatever it holds.
    return json.dumps(value, ensure_ascii=True)[:200]
