// Board settings kept in this browser: how many columns, and which agents they show.

const KEY = 'zodex.liveboard.settings';
export const MIN_COLUMNS = 1;
export const MAX_COLUMNS = 8;
const DEFAULT_COLUMNS = 4;

export class Settings extends EventTarget {
  constructor() {
    super();
    let saved = {};
    try {
      saved = JSON.parse(localStorage.getItem(KEY) || '{}') || {};
    } catch {
      saved = {};
    }
    this.columns = clampColumns(saved.columns ?? DEFAULT_COLUMNS);
    // null: show the most recently active agents; else the agents picked in the drawer.
    this.selection = Array.isArray(saved.selection) ? saved.selection.filter((x) => typeof x === 'string') : null;
  }

  setColumns(n) {
    this.columns = clampColumns(n);
    if (this.selection && this.selection.length > this.columns) {
      this.selection = this.selection.slice(-this.columns);
    }
    this.save();
  }

  // Pick or unpick one agent; picking beyond the column count drops the oldest pick.
  toggle(agentId, visibleNow) {
    let picked = this.selection ? [...this.selection] : [...visibleNow];
    if (picked.includes(agentId)) picked = picked.filter((id) => id !== agentId);
    else picked.push(agentId);
    this.selection = picked.slice(-this.columns);
    this.save();
  }

  followActive() {
    this.selection = null;
    this.save();
  }

  save() {
    localStorage.setItem(KEY, JSON.stringify({ columns: this.columns, selection: this.selection }));
    this.dispatchEvent(new Event('change'));
  }
}

function clampColumns(n) {
  const value = Math.round(Number(n));
  if (!Number.isFinite(value)) return DEFAULT_COLUMNS;
  return Math.min(MAX_COLUMNS, Math.max(MIN_COLUMNS, value));
}
