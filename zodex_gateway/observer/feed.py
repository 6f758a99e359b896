"""Turning what the gateway sees into hub events: calls, agents, and the workers' streams.

Called on the gateway's loop: by the tool handlers around each recorded call, and by the
history capture after each batch of worker events is stored (so a record built here
already reflects the event). Payloads are the observer API's own shapes, so a viewer can
upsert them as they come.

While nobody watches, nothing is built or published: the hub only takes a number for
what it skipped, so a viewer resuming across the hole gets a ``gap`` and reloads from the
timeline. A call then costs no more than its history record.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

from zodex_gateway.history import BY_PERSON, AgentRecord, HistoryStore, HistoryUnavailable, Invocation
from zodex_gateway.observer.display import DisplayStream
from zodex_gateway.observer.hub import EventHub
from zodex_gateway.observer.timeline import TimelineReader, to_json
from zodex_gateway.observer.views import agent_entry, invocation_summary
from zodex_gateway.redaction import SECRETS, SecretRegistry
from zodex_protocol.events import OutputEvent, ProcessEnded, ProcessStarted, WorkerEvent

log = logging.getLogger("zodex.gateway")

# Sessions whose agent and record are remembered; older ones are looked up again.
_SESSIONS_KEPT: Final = 1024


class ObserverFeed:
    def __init__(self, store: HistoryStore, hub: EventHub, secrets: SecretRegistry = SECRETS) -> None:
        self._store = store
        self._hub = hub
        self._secrets = secrets
        self._timeline = TimelineReader(store)
        self._sessions: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()
        self._displays: dict[str, DisplayStream] = {}
        self._agents_sent: dict[str, dict[str, Any]] = {}

    # -- from the tool handlers ------------------------------------------------------------

    def agent_seen(self, agent: AgentRecord) -> None:
        """A gateway met this agent for the first time (it may be new to history too)."""
        new = agent.first_seen == agent.last_seen
        self._guarded(self._publish_agent, agent.agent_id, "agent_first_seen" if new else "agent_updated")

    def agent_updated(self, agent: AgentRecord) -> None:
        self._guarded(self._publish_agent, agent.agent_id, "agent_updated", True)

    def call_started(self, invocation_id: str) -> None:
        self._guarded(self._publish_call, invocation_id, "invocation_started")

    def call_completed(self, invocation_id: str) -> None:
        self._guarded(self._publish_call, invocation_id, "invocation_completed")

    # -- from the history capture ------------------------------------------------------------

    def worker_events(self, events: Sequence[WorkerEvent]) -> None:
        self._guarded(self._worker_events, events)

    def ignores_worker_events(self) -> bool:
        """Whether :meth:`worker_events` would do nothing now (asked from history's writer
        thread, so a stream nobody watches costs the loop no wakeup per stored batch). The
        events are stored before it is asked: a viewer arriving later reads them."""
        return self._hub.quiet

    # -- building --------------------------------------------------------------------------

    def _guarded(self, action: Any, *args: Any) -> None:
        if not self._hub.has_subscribers:
            self._hub.skip()
            # A later viewer starts from what it reads then: each output stream afresh,
            # and no agent change withheld as "already sent".
            self._displays.clear()
            self._agents_sent.clear()
            return
        # A viewer's feed must never fail a tool call or stop the history capture.
        try:
            action(*args)
        except HistoryUnavailable as exc:
            log.warning("observer event skipped: %s", exc)
        except Exception:
            log.exception("observer event failed")

    def _publish_agent(self, agent_id: str, event_type: str, always: bool = False) -> None:
        agent = self._store.agent(agent_id)
        if agent is None:
            return
        entry = agent_entry(
            agent, self._store.agent_workdirs(agent_id), self._store.running_by_agent(agent_id)
        )
        # last_seen moves on every call: only what a viewer shows is worth an event.
        shown = {k: v for k, v in entry.items() if k != "last_seen"}
        if not always and event_type == "agent_updated" and self._agents_sent.get(agent_id) == shown:
            return
        self._agents_sent[agent_id] = shown
        self._hub.publish(event_type, entry, agent_id=agent_id)

    def _publish_call(self, invocation_id: str, event_type: str) -> None:
        inv = self._store.invocation(invocation_id)
        if inv is None:
            return
        presentation_id = self._timeline.anchor_of(inv)
        self._hub.publish(
            event_type, invocation_summary(inv), agent_id=inv.agent_id, presentation_id=presentation_id
        )
        if inv.tool_name == "exec_command" and inv.session_handle:
            self._remember(inv.session_handle, inv.agent_id, inv.id)
        self._publish_record(presentation_id)
        command = self._command_reported_on(inv)
        if command is not None and command != presentation_id:
            # Typing is a record of its own, but its result is the command's latest too: its
            # status, its screen, what the call waiting on it waits for (docs/observer.md).
            self._publish_record(command)
        if inv.agent_id is not None and event_type == "invocation_completed":
            self._publish_agent(inv.agent_id, "agent_updated")

    def _publish_record(self, presentation_id: str) -> None:
        record = self._timeline.record(presentation_id)
        if record is not None:
            self._hub.publish(
                "presentation_updated",
                to_json(self._store, record, diffs=True, secrets=self._secrets),
                agent_id=record.first.agent_id,
                presentation_id=presentation_id,
            )

    def _worker_events(self, events: Sequence[WorkerEvent]) -> None:
        """``events`` come redacted from the history capture (docs/security.md#redaction)."""
        pending: list[tuple[str, int | None, str]] = []  # consecutive output, merged per session
        for event in events:
            if isinstance(event, OutputEvent):
                # seq None: the end the redactor held back, let go as the process ends.
                handle, seq = event.session, event.seq
                if pending and pending[-1][0] == handle:
                    last_seq = pending[-1][1]
                    pending[-1] = (handle, last_seq if seq is None else seq, pending[-1][2] + event.text)
                else:
                    pending.append((handle, seq, event.text))
                continue
            self._flush_output(pending)
            pending = []
            if isinstance(event, ProcessStarted):
                self._process_started(event)
            else:
                self._process_ended(event)
        self._flush_output(pending)

    def _flush_output(self, pieces: list[tuple[str, int | None, str]]) -> None:
        if not pieces:
            return
        for handle, seq, text in pieces:
            if not text:
                continue  # all of it held back by the redactor for now
            agent_id, presentation_id = self._session(handle)
            display = self._displays.get(handle)
            if display is None:
                display = self._displays[handle] = DisplayStream(self._secrets)
            payload = {"session_handle": handle, "seq": seq, "text": text, "display_text": display.feed(text)}
            self._hub.publish("output", payload, agent_id=agent_id, presentation_id=presentation_id)

    def _process_started(self, event: ProcessStarted) -> None:
        # The capture stored this start with its tag (the exec call), so history already
        # names the session's creator: _session reads it from there.
        handle = event.session
        agent_id, presentation_id = self._session(handle)
        payload = {
            "session_handle": handle,
            "pid": event.pid,
            "cmd": event.cmd,
            "cwd": event.cwd,
            "started_at_ms": _ms(event.started_at),
        }
        self._hub.publish("process_started", payload, agent_id=agent_id, presentation_id=presentation_id)
        if agent_id is not None:
            self._publish_agent(agent_id, "agent_updated")

    def _process_ended(self, event: ProcessEnded) -> None:
        handle = event.session
        agent_id, presentation_id = self._session(handle)
        display = self._displays.pop(handle, None)
        rest = display.finish() if display is not None else ""
        if rest:
            payload = {"session_handle": handle, "seq": None, "text": "", "display_text": rest}
            self._hub.publish("output", payload, agent_id=agent_id, presentation_id=presentation_id)
        ended = {
            "session_handle": handle,
            "exit_code": event.exit_code,
            "signal": event.signal,
            "reason": event.reason,
            "ended_at_ms": _ms(event.ended_at),
        }
        self._hub.publish("process_ended", ended, agent_id=agent_id, presentation_id=presentation_id)
        process = self._store.process(handle)
        complete = {
            "session_handle": handle,
            "complete": bool(process["output_complete"]) if process else True,
            "output_incomplete_reason": process["output_incomplete_reason"] if process else None,
        }
        self._hub.publish("output_complete", complete, agent_id=agent_id, presentation_id=presentation_id)
        if presentation_id is not None:
            self._publish_record(presentation_id)
        if agent_id is not None:
            self._publish_agent(agent_id, "agent_updated")

    def _command_reported_on(self, inv: Invocation) -> str | None:
        """The command record a model's ``write_stdin`` reports on, if any."""
        if inv.tool_name != "write_stdin" or inv.by == BY_PERSON:
            return None
        handle = inv.session_handle or inv.args.get("session_handle")
        if not isinstance(handle, str):
            return None
        agent_id, command = self._session(handle)
        return command if agent_id == inv.agent_id else None

    def _remember(self, handle: str, agent_id: str | None, presentation_id: str) -> None:
        self._sessions[handle] = (agent_id, presentation_id)
        self._sessions.move_to_end(handle)
        while len(self._sessions) > _SESSIONS_KEPT:
            self._sessions.popitem(last=False)

    def _session(self, handle: str) -> tuple[str | None, str | None]:
        known = self._sessions.get(handle)
        if known is not None:
            return known
        process = self._store.process(handle)
        creator = process and process["creator_invocation_id"]
        if not creator:
            return None, None  # not a call this runtime recorded (another gateway's, say)
        found = (process["creator_agent_id"] if process else None, str(creator))
        self._remember(handle, *found)
        return found


def _ms(timestamp: float) -> int:
    return round(timestamp * 1000)
