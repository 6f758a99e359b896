// What the board knows: agents, timeline records, and the output of running commands as
// it streams. Views listen for 'agent', 'record' and 'output' events.

import { COMMAND_STATUS, KIND, NO_AGENT } from './contract.js';

const LIVE_OUTPUT_CHARS = 64 * 1024;

export class Store extends EventTarget {
  constructor() {
    super();
    this.agents = new Map(); // agent_id -> agent
    this.records = new Map(); // presentation_id -> timeline record
    this.outputs = new Map(); // presentation_id -> display text of a command, live
    this.partials = new Map(); // presentation_id -> its output's unfinished last line, from a tail
    this.handles = new Map(); // session_handle -> presentation_id of its command
    this.pages = new Map(); // agent_id (NO_AGENT: calls with no agent) -> {cursor, done}: older history still to load
    this.unattributed = false; // a call with no agent is known: its column is shown
    this.lastUpdatedMs = 0;
    this.lastEventMs = 0;
    this.status = null;
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  upsertAgent(agent) {
    this.agents.set(agent.agent_id, agent);
    this.emit('agent', { agent });
  }

  upsertRecord(record) {
    const id = record.presentation_id;
    const known = this.records.get(id);
    // Fetched pages and pushed updates race; the newer version of a record wins.
    if (known && known.updated_at_ms > record.updated_at_ms) return;
    this.records.set(id, record);
    this.lastUpdatedMs = Math.max(this.lastUpdatedMs, record.updated_at_ms);
    if (record.agent_id === null) this.unattributed = true;
    this.touchAgent(record);
    if (record.kind === KIND.COMMAND) {
      if (record.session_handle) this.handles.set(record.session_handle, id);
      this.settleOutput(record);
    }
    this.emit('record', { record, isNew: !known });
  }

  // The runtime does not push an agent for a new last_seen alone; its records show it.
  touchAgent(record) {
    const agent = this.agents.get(record.agent_id);
    if (!agent || Date.parse(record.updated_at) <= Date.parse(agent.last_seen)) return;
    this.upsertAgent({ ...agent, last_seen: record.updated_at });
  }

  // Streamed output comes as complete lines; a record's tail (the truth as of its update)
  // also holds the line still being written. That partial line is shown until the next
  // streamed text, which carries its final form. Streamed text that already ends with the
  // tail's complete lines is kept: it may reach further back than the tail's last characters.
  settleOutput(record) {
    const id = record.presentation_id;
    const tail = record.output_tail;
    const cut = tail.lastIndexOf('\n') + 1;
    const [lines, partial] = [tail.slice(0, cut), tail.slice(cut)];
    const live = this.outputs.get(id);
    const committed =
      live === undefined ? undefined : live.slice(0, live.length - (this.partials.get(id) || '').length);
    if (committed !== undefined && (!tail || committed.endsWith(lines))) {
      if (!tail) return;
      this.outputs.set(id, committed + partial);
    } else {
      this.outputs.set(id, tail);
    }
    this.partials.set(id, partial);
  }

  appendOutput(presentationId, sessionHandle, text) {
    const id = presentationId || this.handles.get(sessionHandle);
    if (!id || !text) return;
    const record = this.records.get(id);
    if (record && record.kind === KIND.COMMAND && record.status !== COMMAND_STATUS.RUNNING) return;
    const live = this.outputs.get(id) ?? '';
    let next = live.slice(0, live.length - (this.partials.get(id) || '').length) + text;
    this.partials.delete(id);
    if (next.length > LIVE_OUTPUT_CHARS) {
      next = next.slice(-LIVE_OUTPUT_CHARS);
      const newline = next.indexOf('\n');
      if (newline >= 0) next = next.slice(newline + 1);
    }
    this.outputs.set(id, next);
    this.emit('output', { presentationId: id });
  }

  outputOf(record) {
    return this.outputs.get(record.presentation_id) ?? record.output_tail;
  }

  recordsOf(agentId) {
    return [...this.records.values()].filter((record) => columnOf(record) === agentId);
  }
}

// The column a record belongs in: its agent's, or NO_AGENT's for a call with no agent.
export function columnOf(record) {
  return record.agent_id ?? NO_AGENT;
}

// Newest first; ids (time-sorted) break ties.
export function newerFirst(a, b) {
  const byTime = b.started_at_ms - a.started_at_ms;
  if (byTime) return byTime;
  return a.presentation_id < b.presentation_id ? 1 : a.presentation_id > b.presentation_id ? -1 : 0;
}
