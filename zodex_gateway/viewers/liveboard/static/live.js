// The event stream: applies pushed events to the store, reconnects, and after any break
// (a gap, an error, the first connection) re-reads what changed meanwhile.

import * as api from './api.js';
import { EVENT, MAX_PAGE_RECORDS } from './contract.js';

// Clocks of the page and the runtime are the same machine's, but a record may be written
// a little after the moment it reports; look back a little further than strictly needed.
const RECOVERY_MARGIN_MS = 5000;
const RECOVERY_PAGES = 20;
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 15000;

export class Live {
  constructor(store, onState) {
    this.store = store;
    this.onState = onState;
    this.retryMs = RETRY_FIRST_MS;
    // The first connection re-reads what changed since the page started loading.
    this.recoverOnOpen = true;
    this.lostAt = Date.now();
    this.source = null;
    this.outputAgents = [];
    this.agentsDuringFetch = null; // agents pushed while a recovery reads the list of agents
  }

  start() {
    this.open();
  }

  // Output streams only for shown columns: a board hiding a busy agent does not carry
  // its output. A change of columns reopens the stream and re-reads what changed meanwhile.
  setOutputAgents(ids) {
    const wanted = [...ids].sort();
    if (wanted.join(',') === this.outputAgents.join(',')) return;
    this.outputAgents = wanted;
    if (!this.source) return;
    this.source.close();
    this.recoverOnOpen = true;
    this.lostAt = Date.now();
    this.open();
  }

  open() {
    clearTimeout(this.retryTimer);
    const source = new EventSource(api.eventsUrl(this.outputAgents));
    this.source = source;
    this.onState(this.everOpen ? 'reconnecting' : 'connecting');
    source.onopen = () => {
      this.everOpen = true;
      this.retryMs = RETRY_FIRST_MS;
      this.onState('live');
      if (this.recoverOnOpen) {
        this.recoverOnOpen = false;
        this.recover(this.lostAt);
      }
    };
    source.onmessage = (message) => this.handle(JSON.parse(message.data));
    source.onerror = () => {
      if (!this.recoverOnOpen) {
        this.recoverOnOpen = true;
        this.lostAt = Date.now();
      }
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up (the viewer answered with an error): retry ourselves.
        this.onState('offline');
        this.retryTimer = setTimeout(() => this.open(), this.retryMs);
        this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
      } else {
        this.onState('reconnecting');
      }
    };
  }

  handle(event) {
    this.store.lastEventMs = Math.max(this.store.lastEventMs, event.emitted_at_ms);
    const payload = event.payload;
    switch (event.event_type) {
      case EVENT.AGENT_FIRST_SEEN:
      case EVENT.AGENT_UPDATED:
        this.store.upsertAgent(payload);
        if (this.agentsDuringFetch) this.agentsDuringFetch.push(payload);
        break;
      case EVENT.PRESENTATION_UPDATED:
        this.store.upsertRecord(payload);
        break;
      case EVENT.OUTPUT:
        // presentation_id is null for a session whose command the runtime no longer knows.
        this.store.appendOutput(event.presentation_id, payload.session_handle, payload.display_text);
        break;
      case EVENT.GAP: {
        // 0 means the hub cannot tell when the missed events began: use our own last one.
        const hints = [payload.recovery_since_ms, this.store.lastEventMs].filter((ms) => ms > 0);
        this.recover(hints.length ? Math.min(...hints) : this.lostAt);
        break;
      }
      default:
        break; // what the board does not show: calls, process starts and ends
    }
  }

  async recover(sinceMs) {
    const since = Math.max(0, (sinceMs || Date.now()) - RECOVERY_MARGIN_MS);
    try {
      // A list of agents may be answered after a pushed change it predates (its running
      // count would then stick at the older value): what was pushed meanwhile is applied
      // again after it, in order, so the newest state of each agent is the one kept.
      this.agentsDuringFetch = [];
      let agents;
      try {
        ({ agents } = await api.agents());
      } finally {
        const pushed = this.agentsDuringFetch;
        this.agentsDuringFetch = null;
        for (const agent of agents || []) this.store.upsertAgent(agent);
        for (const agent of pushed) this.store.upsertAgent(agent);
      }
      let cursor = null;
      for (let page = 0; page < RECOVERY_PAGES; page++) {
        const found = await api.timeline({ recovery_since_ms: Math.floor(since), limit: MAX_PAGE_RECORDS, cursor });
        for (const record of found.records) this.store.upsertRecord(record);
        cursor = found.next_cursor;
        if (!cursor) break;
      }
    } catch {
      // Try again on the next connection.
      if (!this.recoverOnOpen) {
        this.recoverOnOpen = true;
        this.lostAt = since;
      }
    }
  }
}
