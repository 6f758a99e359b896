// Liveboard's entry point: wires the store, the board, the drawer and the event stream.

import * as api from './api.js';
import { Board } from './columns.js';
import { NO_AGENT } from './contract.js';
import { Drawer } from './drawer.js';
import { duration } from './format.js';
import { Live } from './live.js';
import { Settings } from './settings.js';
import { Store } from './store.js';
import { initTheme } from './theme.js';

const $ = (id) => document.getElementById(id);

const CONNECTION_LABELS = { connecting: 'connecting', live: 'live', reconnecting: 'reconnecting', offline: 'offline' };

function showConnection(state) {
  const el = $('connection');
  el.dataset.state = state;
  el.querySelector('.label').textContent = CONNECTION_LABELS[state] || state;
  el.title = state === 'live' ? 'Receiving events as they happen' : 'Not receiving events; retrying';
}

async function loadStatus(store) {
  try {
    store.status = await api.status();
    $('runtime').textContent = `runtime ${store.status.runtime_id}`;
  } catch (error) {
    $('runtime').textContent = error.message;
  }
}

async function loadAgents(store, board) {
  try {
    const { agents } = await api.agents();
    for (const agent of agents) store.upsertAgent(agent);
    // Calls with no agent are in no list of agents: their newest record tells whether
    // there are any (and so whether their column is shown).
    const unattributed = await api.timeline({ agent_id: NO_AGENT, limit: 1 });
    for (const record of unattributed.records) store.upsertRecord(record);
  } catch (error) {
    $('runtime').textContent = `cannot load agents: ${error.message}`;
  } finally {
    board.loaded = true;
    board.render();
  }
}

function main() {
  initTheme($('theme-toggle'));
  const store = new Store();
  const settings = new Settings();
  const board = new Board($('board'), store, settings);
  new Drawer(
    { drawer: $('drawer'), backdrop: $('backdrop'), openButton: $('agents-button'), countBadge: $('agent-count') },
    store,
    settings,
  );
  const live = new Live(store, showConnection);
  board.onColumns = (ids) => live.setOutputAgents(ids);
  board.render();
  // The status comes first: it says whether cards offer a typing box (observer.steer).
  // The stream opens once the columns are known, so it need not reopen at once; what
  // happened before it opened is read back from the timeline on its first connection.
  loadStatus(store)
    .then(() => loadAgents(store, board))
    .finally(() => live.start());
  setInterval(() => {
    const now = Date.now();
    for (const el of document.querySelectorAll('[data-live-since]')) {
      el.textContent = duration(now - Number(el.dataset.liveSince));
    }
    board.tick(now);
  }, 1000);
}

main();
