// "All agents": every agent the runtime knows, to pick which get a column, and how many.

import { visibleAgentIds } from './columns.js';
import { h, replaceChildren, startEllipsis } from './dom.js';
import { ago, parseIso, shortPath } from './format.js';
import { MAX_COLUMNS, MIN_COLUMNS } from './settings.js';

export class Drawer {
  constructor({ drawer, backdrop, openButton, countBadge }, store, settings) {
    this.drawer = drawer;
    this.backdrop = backdrop;
    this.store = store;
    this.settings = settings;
    this.countBadge = countBadge;
    this.list = h('ul', { class: 'agent-list', 'data-testid': 'drawer-agents' });
    this.columnsInput = h('input', {
      type: 'number',
      min: String(MIN_COLUMNS),
      max: String(MAX_COLUMNS),
      'data-testid': 'column-count',
      'aria-label': 'Columns shown',
    });
    this.columnsInput.value = String(settings.columns);
    this.columnsInput.addEventListener('change', () => {
      settings.setColumns(this.columnsInput.value);
      this.columnsInput.value = String(settings.columns);
    });
    this.modeNote = h('p', { class: 'hint' });
    this.followButton = h('button', {
      class: 'btn',
      'data-testid': 'follow-active',
      text: 'Follow most active',
      onclick: () => settings.followActive(),
    });
    replaceChildren(
      drawer,
      h(
        'div',
        { class: 'drawer-head' },
        h('h2', { text: 'All agents' }),
        h('span', { class: 'spacer' }),
        h('button', {
          class: 'icon-btn',
          'aria-label': 'Close',
          title: 'Close (Esc)',
          text: '✕',
          onclick: () => this.close(),
        }),
      ),
      h(
        'div',
        { class: 'drawer-settings' },
        h('label', { class: 'field' }, 'Columns', this.columnsInput),
        this.followButton,
      ),
      this.modeNote,
      this.list,
    );
    openButton.addEventListener('click', () => (this.drawer.hidden ? this.open() : this.close()));
    backdrop.addEventListener('click', () => this.close());
    document.addEventListener('keydown', (event) => {
      if (event.key === 'Escape' && !this.drawer.hidden) this.close();
    });
    store.addEventListener('agent', () => this.render());
    settings.addEventListener('change', () => this.render());
    this.render();
  }

  open() {
    this.drawer.hidden = false;
    this.backdrop.hidden = false;
    this.render();
  }

  close() {
    this.drawer.hidden = true;
    this.backdrop.hidden = true;
  }

  render() {
    const agents = [...this.store.agents.values()].sort((a, b) => parseIso(b.last_seen) - parseIso(a.last_seen));
    this.countBadge.textContent = String(agents.length);
    if (this.drawer.hidden) return;
    const shown = visibleAgentIds(this.store, this.settings);
    this.modeNote.textContent = this.settings.selection
      ? `Showing the agents you picked (up to ${this.settings.columns}).`
      : `Showing the ${this.settings.columns} most recently active agents. Tick one to choose for yourself.`;
    this.followButton.disabled = !this.settings.selection;
    const now = Date.now();
    replaceChildren(
      this.list,
      agents.length ? null : h('li', { class: 'muted', text: 'No agents yet.' }),
      agents.map((agent) => {
        const box = h('input', {
          type: 'checkbox',
          'data-testid': 'drawer-toggle',
          'aria-label': `Show ${agent.agent_id}`,
        });
        box.checked = shown.includes(agent.agent_id);
        box.addEventListener('change', () =>
          this.settings.toggle(agent.agent_id, visibleAgentIds(this.store, this.settings)),
        );
        const count = agent.active_processes;
        return h(
          'li',
          { 'data-testid': 'drawer-agent', 'data-agent-id': agent.agent_id, class: box.checked ? 'shown' : '' },
          h(
            'label',
            {},
            box,
            h('span', { class: 'agent-id', text: agent.agent_id }),
            h('span', { class: `alias${agent.alias ? '' : ' unnamed'}`, text: agent.alias || 'no alias' }),
            h('span', { class: 'spacer' }),
            count ? h('span', { class: 'procs active', text: `${count} running` }) : null,
          ),
          h(
            'div',
            { class: 'sub' },
            startEllipsis(
              h('span', { class: 'workdir', title: agent.workdirs[0] ?? '' }),
              shortPath(agent.workdirs[0], 4) || 'no workdir yet',
            ),
            h('span', { class: 'last-seen', text: ago(parseIso(agent.last_seen), now) }),
          ),
        );
      }),
    );
  }
}
