// One card per timeline record. A card keeps what the reader opened or closed across the
// updates of its record, and redraws only its output while a command streams.

import { BY, CALL_STATUS, COMMAND_STATUS, KIND, OPERATION, TERMINATION } from './contract.js';
import { h, replaceChildren } from './dom.js';
import { clock, countLines, diffRows, duration, fullTime, relativeTo, typedPieces } from './format.js';
import { SteerBox } from './steer.js';

const OPERATION_LABELS = {
  [OPERATION.CREATED]: 'Added',
  [OPERATION.EDITED]: 'Edited',
  [OPERATION.DELETED]: 'Deleted',
  [OPERATION.RENAMED]: 'Renamed',
};
const DIFF_SIGNS = { add: '+', del: '-', ctx: ' ', hunk: '', note: '' };
const DIFF_ROWS_SHOWN = 400;

export class Card {
  constructor(record, ctx) {
    this.ctx = ctx; // {store, workdir(): the column's current workdir}
    this.el = h('article', { class: 'card', 'data-testid': 'card' });
    this.outputOpen = undefined; // undefined: follow the default (open while running)
    this.filesOpen = new Map(); // path -> open
    this.commandOpen = false;
    this.allDiffRows = new Set();
    this.outputEl = null;
    this.steerBox = null; // kept across updates: what the person is typing stays in it
    this.update(record);
  }

  update(record) {
    this.record = record;
    const el = this.el;
    el.dataset.presentationId = record.presentation_id;
    el.dataset.kind = record.kind;
    el.dataset.status = record.status;
    const failed = record.kind === KIND.COMMAND ? commandFailed(record) : record.status === CALL_STATUS.ERROR;
    el.className = `card card-${record.kind} status-${record.status}${failed ? ' failed' : ''}`;
    replaceChildren(el, BUILDERS[record.kind].call(this, record));
  }

  // Streamed output arrived for this command: redraw just the output text.
  refreshOutput() {
    if (!this.outputEl) {
      this.update(this.record); // the first output of a command that had none
      return;
    }
    const pre = this.outputEl;
    const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
    const text = this.ctx.store.outputOf(this.record);
    pre.textContent = text;
    this.outputSummary.textContent = outputLabel(text, this.record);
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }
}

function head(icon, title, record, ...extra) {
  return h(
    'div',
    { class: 'card-head' },
    h('span', { class: 'kind-icon', 'aria-hidden': 'true', text: icon }),
    title,
    h('span', { class: 'spacer' }),
    ...extra,
    h('time', {
      class: 'time',
      datetime: record.started_at,
      title: fullTime(record.started_at_ms),
      text: clock(record.started_at_ms),
    }),
  );
}

function statusBadge(record) {
  if (record.kind !== KIND.COMMAND) {
    const ok = record.status === CALL_STATUS.OK;
    return h('span', { class: `badge ${ok ? 'ok' : 'fail'}`, 'data-testid': 'status', text: record.status });
  }
  if (record.status === COMMAND_STATUS.RUNNING) {
    return h('span', { class: 'badge running', 'data-testid': 'status' }, h('span', { class: 'pulse' }), 'running');
  }
  const code = record.exit_code;
  // A killed, timed-out or lost command's exit code is the signal's artefact: name the
  // reason. None at all: a call the runtime stopped before the command was known.
  const text = endedOnItsOwn(record) ? (code === null ? 'exited' : `exit ${code}`) : record.termination_reason;
  const title = code === null ? undefined : `exit code ${code}`;
  return h('span', { class: `badge ${commandFailed(record) ? 'fail' : 'ok'}`, 'data-testid': 'status', title, text });
}

function endedOnItsOwn(record) {
  return record.termination_reason === null || record.termination_reason === TERMINATION.EXIT;
}

function commandFailed(record) {
  return record.status !== COMMAND_STATUS.RUNNING && (record.exit_code !== 0 || !endedOnItsOwn(record));
}

function outputLabel(text, record) {
  const lines = countLines(text);
  const cut = record.output_truncated ? ' · tail' : '';
  return `Output · ${lines} line${lines === 1 ? '' : 's'}${cut}`;
}

function buildCommand(record) {
  const running = record.status === COMMAND_STATUS.RUNNING;
  const command = h('code', {
    class: `command${this.commandOpen ? ' open' : ''}`,
    'data-testid': 'command',
    title: 'Click to show the whole command',
    text: record.command,
    onclick: (event) => {
      this.commandOpen = !this.commandOpen;
      event.currentTarget.classList.toggle('open', this.commandOpen);
    },
  });
  const meta = h('div', { class: 'meta' }, statusBadge(record));
  if (running) {
    meta.append(
      h('span', {
        class: 'duration',
        'data-live-since': String(record.started_at_ms),
        text: duration(Date.now() - record.started_at_ms),
      }),
    );
  } else if (record.duration_ms !== null) {
    meta.append(h('span', { class: 'duration', title: 'duration', text: duration(record.duration_ms) }));
  }
  if (record.waiting_for) {
    meta.append(
      h(
        'span',
        {
          class: 'waiting',
          'data-testid': 'waiting-for',
          title: 'the call waiting now returns when the output matches',
        },
        'waiting for ',
        h('code', { text: record.waiting_for }),
      ),
    );
  }
  if (record.poll_count) {
    meta.append(
      h('span', {
        class: 'polls',
        title: 'empty write_stdin polls folded into this command',
        text: `${record.poll_count} poll${record.poll_count === 1 ? '' : 's'}`,
      }),
    );
  }
  const workdir = this.ctx.workdir();
  if (record.cwd && record.cwd !== workdir) {
    meta.append(h('span', { class: 'cwd', title: record.cwd, text: relativeTo(record.cwd, workdir) }));
  }
  const text = this.ctx.store.outputOf(record);
  this.outputEl = null;
  let output = null;
  if (text || running) {
    // A full-screen program's stream is fragments: the screen above says it, so the stream starts closed.
    const open = this.outputOpen ?? (running && !record.screen);
    this.outputSummary = h('summary', { text: outputLabel(text, record) });
    this.outputEl = h('pre', { class: 'output', 'data-testid': 'output', text });
    output = h('details', { class: 'output-box', open }, this.outputSummary, this.outputEl);
    output.addEventListener('toggle', () => {
      this.outputOpen = output.open;
    });
    // Show the newest lines first; drawn before layout, so defer the scroll.
    requestAnimationFrame(() => {
      if (this.outputEl) this.outputEl.scrollTop = this.outputEl.scrollHeight;
    });
  }
  return [head('$', command, record), meta, screenBlock(record), output, steerBox.call(this, record, running)];
}

// The typing box, on a running command's card when the runtime lets a person type
// (observer.steer; /v1/status says so).
function steerBox(record, running) {
  if (!running || !record.session_handle || !this.ctx.store.status?.steer) return null;
  if (!this.steerBox || this.steerBox.handle !== record.session_handle) {
    this.steerBox = new SteerBox(record.session_handle);
  }
  return this.steerBox.el;
}

// A full-screen program's screen as its latest result showed it (docs/output.md#screens):
// a fixed-width block of its rows, the cursor's cell marked.
function screenBlock(record) {
  const screen = record.screen;
  if (!screen || !Array.isArray(screen.rows)) return null;
  const [cursorRow, cursorColumn] = Array.isArray(screen.cursor) ? screen.cursor : [-1, -1];
  const rows = screen.rows.map((row, index) => {
    if (index !== cursorRow) return h('div', { class: 'screen-row', text: row || ' ' });
    const padded = row.padEnd(cursorColumn + 1, ' ');
    return h(
      'div',
      { class: 'screen-row' },
      padded.slice(0, cursorColumn),
      h('span', { class: 'screen-cursor', text: padded[cursorColumn] }),
      padded.slice(cursorColumn + 1),
    );
  });
  const label = `Screen · ${screen.alternate ? 'full-screen program' : 'redrawn'}${screen.title ? ` · ${screen.title}` : ''}`;
  return h(
    'details',
    { class: 'output-box', open: true },
    h('summary', { text: label }),
    h('div', { class: 'screen', 'data-testid': 'screen' }, ...rows),
  );
}

function buildFiles(record) {
  const files = record.files;
  const title = h('span', {
    class: 'title',
    text: files.length === 1 ? 'apply_patch' : `apply_patch · ${files.length} files`,
  });
  const workdir = record.workdir || this.ctx.workdir();
  const boxes = files.map((file) => fileBox.call(this, file, workdir));
  return [head('±', title, record), ...boxes];
}

function fileBox(file, workdir) {
  const operation = file.operation;
  const key = file.path;
  const open = this.filesOpen.get(key) ?? true;
  const path = h('code', { class: 'path', title: file.path, text: relativeTo(file.path, workdir) });
  const label = [
    h('span', { class: `op op-${operation}`, 'data-testid': 'file-op', text: OPERATION_LABELS[operation] }),
  ];
  if (operation === OPERATION.RENAMED) {
    label.push(
      h('code', { class: 'path old', title: file.old_path, text: relativeTo(file.old_path, workdir) }),
      h('span', { class: 'arrow', text: '→' }),
    );
  }
  label.push(path, h('span', { class: 'spacer' }));
  if (file.added) label.push(h('span', { class: 'adds', text: `+${file.added}` }));
  if (file.removed) label.push(h('span', { class: 'dels', text: `−${file.removed}` }));
  const box = h('details', { class: 'file', 'data-testid': 'file', open }, h('summary', {}, ...label));
  box.addEventListener('toggle', () => this.filesOpen.set(key, box.open));
  box.append(diffTable.call(this, file, key));
  return box;
}

function diffTable(file, key) {
  const rows = diffRows(file.diff);
  const showAll = this.allDiffRows.has(key);
  const shown = showAll ? rows : rows.slice(0, DIFF_ROWS_SHOWN);
  const table = h('div', { class: 'diff', 'data-testid': 'diff' });
  for (const row of shown) {
    table.append(
      h(
        'div',
        { class: `diff-row ${row.kind}`, 'data-testid': 'diff-row', 'data-kind': row.kind },
        h('span', { class: 'ln', text: row.old ?? '' }),
        h('span', { class: 'ln', text: row.new ?? '' }),
        h('span', { class: 'sign', text: DIFF_SIGNS[row.kind] }),
        h('span', { class: 'txt', text: row.text }),
      ),
    );
  }
  if (shown.length < rows.length) {
    table.append(
      h('button', {
        class: 'link more-rows',
        text: `Show ${rows.length - shown.length} more rows`,
        onclick: () => {
          this.allDiffRows.add(key);
          this.update(this.record);
        },
      }),
    );
  }
  if (file.diff_truncated) table.append(h('div', { class: 'diff-row note', text: 'diff cut here by the observer' }));
  return table;
}

// The command a session runs says more than its handle; the handle stays in the tooltip.
function sessionLabel(record, store) {
  const handle = record.session_handle || '';
  const command = store.records.get(store.handles.get(handle))?.command;
  return h('code', {
    class: 'handle',
    title: handle ? `session ${handle}` : '',
    text: command || handle || 'unknown session',
  });
}

function buildStdin(record) {
  const typed = h('code', { class: 'chars', 'data-testid': 'chars' });
  for (const piece of typedPieces(record.chars)) {
    typed.append(piece.key ? h('kbd', { class: 'key', text: piece.key }) : document.createTextNode(piece.text));
  }
  const person = record.by === BY.PERSON;
  if (person) this.el.classList.add('by-person');
  const who = person ? 'a person typed into ' : 'typed into ';
  const title = h('span', { class: 'title' }, who, sessionLabel(record, this.ctx.store));
  return [head('⌨', title, record, statusBadge(record)), h('div', { class: 'typed' }, typed)];
}

function buildKill(record) {
  const title = h('span', { class: 'title' }, 'killed ', sessionLabel(record, this.ctx.store));
  const parts = [head('✕', title, record, statusBadge(record))];
  if (record.summary) parts.push(h('div', { class: 'summary', text: record.summary }));
  return parts;
}

function buildGeneric(record) {
  const title = h('span', { class: 'title', text: record.tool_name });
  const parts = [head('•', title, record, statusBadge(record))];
  if (record.summary && record.summary !== record.error) {
    parts.push(h('div', { class: 'summary', text: record.summary }));
  }
  if (record.error) parts.push(h('pre', { class: 'error', 'data-testid': 'error', text: record.error }));
  return parts;
}

const BUILDERS = {
  [KIND.COMMAND]: buildCommand,
  [KIND.FILE_CHANGES]: buildFiles,
  [KIND.STDIN]: buildStdin,
  [KIND.KILL]: buildKill,
  [KIND.GENERIC]: buildGeneric,
};
