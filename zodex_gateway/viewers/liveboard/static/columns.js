// The board: one column per shown agent, each a header (id, alias editor, workdir, running
// processes) over its timeline, newest on top, with older history loaded on scrolling down.
// Calls with no agent get one more column, "Unattributed", after the agents' once one is
// known; it takes no place of an agent's (the column count is the agents').

import * as api from './api.js';
import { Card } from './cards.js';
import { COMMAND_STATUS, KIND, MAX_ALIAS_CHARS, NO_AGENT } from './contract.js';
import { h, replaceChildren, startEllipsis } from './dom.js';
import { ago, parseIso, shortPath } from './format.js';
import { columnOf, newerFirst } from './store.js';

const PAGE = 30;

export function visibleAgentIds(store, settings) {
  if (settings.selection) {
    return settings.selection.filter((id) => store.agents.has(id)).slice(0, settings.columns);
  }
  // Follow the most recently active agents, laid out oldest first so columns stay put.
  return [...store.agents.values()]
    .sort((a, b) => parseIso(b.last_seen) - parseIso(a.last_seen))
    .slice(0, settings.columns)
    .sort((a, b) => parseIso(a.first_seen) - parseIso(b.first_seen) || a.agent_id.localeCompare(b.agent_id))
    .map((agent) => agent.agent_id);
}

export class Board {
  constructor(root, store, settings) {
    this.root = root;
    this.store = store;
    this.settings = settings;
    this.columns = new Map();
    this.loaded = false;
    store.addEventListener('agent', () => this.render());
    store.addEventListener('record', (event) => {
      const record = event.detail.record;
      const column = this.columns.get(columnOf(record));
      if (column) column.upsert(record);
      else if (record.agent_id === null) this.render(); // the first call with no agent: its column appears
    });
    store.addEventListener('output', (event) => {
      const record = store.records.get(event.detail.presentationId);
      if (record) this.columns.get(columnOf(record))?.output(record);
    });
    settings.addEventListener('change', () => this.render());
  }

  render() {
    const ids = visibleAgentIds(this.store, this.settings);
    if (this.store.unattributed) ids.push(NO_AGENT);
    this.onColumns?.(ids);
    for (const [id, column] of this.columns) {
      if (!ids.includes(id)) {
        column.destroy();
        this.columns.delete(id);
      }
    }
    for (const id of ids) {
      const column = this.columns.get(id) ?? new Column(id, this.store);
      this.columns.set(id, column);
      column.renderHeader();
    }
    this.root.style.setProperty('--columns', String(Math.max(ids.length, 1)));
    if (!ids.length) {
      const shown = this.root.querySelector('.empty-board');
      if (!shown || shown.dataset.loaded !== String(this.loaded)) replaceChildren(this.root, emptyBoard(this.loaded));
      return;
    }
    const wanted = ids.map((id) => this.columns.get(id).el);
    const current = [...this.root.children];
    // Moving a column resets its scroll position: only move when the order changed.
    if (wanted.length !== current.length || wanted.some((el, i) => el !== current[i])) {
      replaceChildren(this.root, wanted);
    }
  }

  tick(now) {
    for (const column of this.columns.values()) column.tick(now);
  }
}

function emptyBoard(loaded) {
  return h(
    'div',
    { class: 'empty-board', 'data-testid': 'empty-board', 'data-loaded': String(loaded) },
    h('div', { class: 'empty-title', text: loaded ? 'No agents yet' : 'Loading…' }),
    loaded
      ? h('p', {
          text: 'When an MCP client calls a Zodex tool, its agent gets a column here and its calls appear live.',
        })
      : null,
  );
}

class Column {
  constructor(agentId, store) {
    this.agentId = agentId;
    this.store = store;
    this.cards = new Map(); // presentation_id -> Card
    this.order = []; // records newest first, parallel to the cards in the list
    this.editing = false;
    this.headerEl = h('header', { class: 'col-head' });
    this.sentinel = h('div', { class: 'more', 'data-testid': 'load-older' });
    this.list = h('div', { class: 'cards', 'data-testid': 'cards' }, this.sentinel);
    this.el = h(
      'section',
      {
        class: agentId === NO_AGENT ? 'column unattributed' : 'column',
        'data-testid': 'column',
        'data-agent-id': agentId,
      },
      this.headerEl,
      this.list,
    );
    this.ctx = { store, workdir: () => this.agent?.workdirs[0] ?? '' };
    for (const record of store.recordsOf(agentId).sort(newerFirst)) this.upsert(record);
    this.observer = new IntersectionObserver(
      (entries) => {
        if (entries.some((entry) => entry.isIntersecting)) this.loadOlder();
      },
      { root: this.list, rootMargin: '200px' },
    );
    this.observer.observe(this.sentinel);
    this.loadFirst();
  }

  destroy() {
    this.observer.disconnect();
    this.el.remove();
  }

  get agent() {
    return this.store.agents.get(this.agentId);
  }

  renderHeader() {
    if (this.agentId === NO_AGENT) {
      this.renderUnattributedHeader();
      return;
    }
    if (this.editing) return; // do not pull the input away from under the typist
    const agent = this.agent || { agent_id: this.agentId, alias: null, workdirs: [], active_processes: 0 };
    const alias = agent.alias || '';
    const workdir = agent.workdirs[0] ?? '';
    const count = agent.active_processes;
    replaceChildren(
      this.headerEl,
      h(
        'div',
        { class: 'col-title' },
        h('span', { class: 'agent-id', 'data-testid': 'agent-id', text: agent.agent_id }),
        h('span', {
          class: `alias${alias ? '' : ' unnamed'}`,
          'data-testid': 'alias',
          title: alias,
          text: alias || 'no alias',
        }),
        h('button', {
          class: 'icon-btn',
          'data-testid': 'alias-edit',
          title: 'Rename this agent',
          'aria-label': 'Rename this agent',
          text: '✎',
          onclick: () => this.editAlias(),
        }),
        h('span', { class: 'spacer' }),
        processes(count),
      ),
      h(
        'div',
        { class: 'col-sub' },
        startEllipsis(
          h('span', { class: 'workdir', 'data-testid': 'workdir', title: workdir }),
          workdir ? shortPath(workdir, 4) : 'no workdir yet',
        ),
        h('span', {
          class: 'last-seen',
          'data-last-seen': String(parseIso(agent.last_seen)),
          text: ago(parseIso(agent.last_seen)),
        }),
      ),
    );
  }

  // No agent, so no alias: what the column holds, how many of its commands run, and when
  // the last of its calls was.
  renderUnattributedHeader() {
    let running = 0;
    let lastMs = 0;
    for (const record of this.store.recordsOf(NO_AGENT)) {
      if (record.kind === KIND.COMMAND && record.status === COMMAND_STATUS.RUNNING) running++;
      lastMs = Math.max(lastMs, record.updated_at_ms);
    }
    replaceChildren(
      this.headerEl,
      h(
        'div',
        { class: 'col-title' },
        h('span', {
          class: 'agent-id',
          'data-testid': 'agent-id',
          title: 'Calls from MCP clients that sent no session: they belong to no agent',
          text: 'Unattributed',
        }),
        h('span', { class: 'spacer' }),
        processes(running),
      ),
      h(
        'div',
        { class: 'col-sub' },
        h('span', { class: 'about', 'data-testid': 'about', text: 'calls from clients with no session' }),
        lastMs ? h('span', { class: 'last-seen', 'data-last-seen': String(lastMs), text: ago(lastMs) }) : null,
      ),
    );
  }

  editAlias() {
    this.editing = true;
    const agent = this.agent;
    const input = h('input', {
      class: 'alias-input',
      'data-testid': 'alias-input',
      maxlength: String(MAX_ALIAS_CHARS),
      placeholder: 'alias (empty clears)',
      'aria-label': 'Alias',
    });
    input.value = agent?.alias || '';
    const note = h('span', { class: 'alias-note', 'data-testid': 'alias-note', text: 'Enter saves · Esc cancels' });
    let saving = false;
    const done = () => {
      this.editing = false;
      this.renderHeader();
    };
    input.addEventListener('keydown', async (event) => {
      if (event.key === 'Escape') {
        event.preventDefault();
        done();
      } else if (event.key === 'Enter' && !saving) {
        event.preventDefault();
        saving = true;
        input.disabled = true;
        note.textContent = 'saving…';
        try {
          const updated = await api.setAlias(this.agentId, input.value);
          this.editing = false;
          this.store.upsertAgent(updated);
          this.renderHeader();
        } catch (error) {
          saving = false;
          input.disabled = false;
          input.focus();
          note.textContent = error.message || 'could not save';
          note.classList.add('error');
        }
      }
    });
    input.addEventListener('blur', () => {
      if (!saving) done();
    });
    const title = this.headerEl.querySelector('.col-title');
    replaceChildren(title, h('span', { class: 'agent-id', text: this.agentId }), input);
    title.after(h('div', { class: 'col-note' }, note));
    this.headerEl.querySelector('.col-sub')?.remove();
    input.focus();
    input.select();
  }

  // A page brings many records at once: the header is drawn once for all of them.
  refreshHeaderSoon() {
    if (this.headerPending) return;
    this.headerPending = true;
    queueMicrotask(() => {
      this.headerPending = false;
      this.renderHeader();
    });
  }

  upsert(record) {
    if (this.agentId === NO_AGENT) this.refreshHeaderSoon(); // its header counts its records
    const known = this.cards.get(record.presentation_id);
    if (known) {
      known.update(record);
      return;
    }
    const card = new Card(record, this.ctx);
    this.cards.set(record.presentation_id, card);
    // Binary search for the first shown record older than this one.
    let low = 0;
    let high = this.order.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (newerFirst(this.order[mid], record) < 0) low = mid + 1;
      else high = mid;
    }
    const before = low < this.order.length ? this.cards.get(this.order[low].presentation_id).el : this.sentinel;
    this.order.splice(low, 0, record);
    this.list.insertBefore(card.el, before);
  }

  output(record) {
    this.cards.get(record.presentation_id)?.refreshOutput();
  }

  async loadFirst() {
    const page = this.store.pages.get(this.agentId);
    if (page) {
      this.showMore();
      return; // shown before: its records are in the store, and so is where to go on
    }
    await this.load(null);
  }

  async loadOlder() {
    const page = this.store.pages.get(this.agentId);
    if (!page || page.done || this.loading) return;
    await this.load(page.cursor);
  }

  async load(cursor) {
    this.loading = true;
    this.showMore('loading…');
    try {
      const found = await api.timeline({ agent_id: this.agentId, limit: PAGE, cursor });
      this.store.pages.set(this.agentId, { cursor: found.next_cursor, done: !found.next_cursor });
      for (const record of found.records) this.store.upsertRecord(record);
      this.loading = false;
      this.showMore();
    } catch (error) {
      this.loading = false;
      this.showMore(`could not load: ${error.message}`, true);
    }
  }

  showMore(text, failed = false) {
    const page = this.store.pages.get(this.agentId);
    this.sentinel.classList.toggle('error', failed);
    const end = this.order.length ? 'beginning of history' : 'nothing recorded yet';
    this.sentinel.textContent = text || (page?.done ? end : 'older…');
    if (!failed && page && !page.done && !this.loading) {
      // Still in view (a short column): the observer will not fire again by itself.
      requestAnimationFrame(() => {
        const list = this.list.getBoundingClientRect();
        const mark = this.sentinel.getBoundingClientRect();
        if (mark.top < list.bottom + 200) this.loadOlder();
      });
    }
  }

  tick(now) {
    for (const el of this.el.querySelectorAll('[data-last-seen]')) {
      el.textContent = ago(Number(el.dataset.lastSeen), now);
    }
  }
}

function processes(count) {
  return h('span', {
    class: `procs${count ? ' active' : ''}`,
    'data-testid': 'active-processes',
    'data-count': String(count),
    title: `${count} running process${count === 1 ? '' : 'es'}`,
    text: count ? `${count} running` : 'idle',
  });
}
