// Formatting for people: times, durations, paths, typed characters, diff rows.

const pad = (n) => String(n).padStart(2, '0');

export function clock(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fullTime(ms) {
  return ms ? new Date(ms).toLocaleString() : '';
}

export function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return '';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${pad(Math.floor(s % 60))}s`;
  return `${Math.floor(m / 60)}h ${pad(m % 60)}m`;
}

export function ago(ms, now = Date.now()) {
  if (!ms) return '';
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function parseIso(value) {
  const t = Date.parse(value || '');
  return Number.isNaN(t) ? 0 : t;
}

// A path as seen from `base` when it lies inside it; else unchanged.
export function relativeTo(path, base) {
  if (!path || !base) return path || '';
  const root = base.endsWith('/') ? base : `${base}/`;
  return path.startsWith(root) ? path.slice(root.length) : path;
}

// The last `keep` segments of a long path, for narrow column headers.
export function shortPath(path, keep = 3) {
  if (!path) return '';
  const parts = path.split('/').filter(Boolean);
  return parts.length <= keep ? path : `…/${parts.slice(-keep).join('/')}`;
}

const NAMED_KEYS = { '\n': '⏎', '\r': '\\r', '\t': '⇥', '\x1b': 'Esc', '\x7f': '⌫', '\b': '^H' };

// Typed characters as pieces: {text} for printable runs, {key} for what is invisible.
export function typedPieces(chars) {
  const pieces = [];
  let run = '';
  for (const ch of chars) {
    const code = ch.codePointAt(0);
    let key = NAMED_KEYS[ch];
    if (key === undefined && (code < 0x20 || (code >= 0x80 && code < 0xa0))) {
      key = code < 0x20 ? `^${String.fromCharCode(code + 64)}` : `\\x${code.toString(16)}`;
    }
    if (key === undefined) {
      run += ch;
      continue;
    }
    if (run) pieces.push({ text: run });
    run = '';
    pieces.push({ key });
  }
  if (run) pieces.push({ text: run });
  return pieces;
}

// A file's unified diff lines (docs/observer.md#timeline-records) as rows with their kind
// (add, del, ctx, hunk, note) and line numbers; `---`/`+++` headers are dropped (the file
// card names the file), and so is anything else a note: the `… N more rows` mark.
export function diffRows(diff) {
  const rows = [];
  // Rows before any hunk header have no line numbers to show.
  let oldLine = null;
  let newLine = null;
  for (const line of diff) {
    if (line.startsWith('--- ') || line.startsWith('+++ ')) continue;
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
    if (hunk) {
      oldLine = Number(hunk[1]);
      newLine = Number(hunk[2]);
      rows.push({ kind: 'hunk', text: line, old: null, new: null });
    } else if (line.startsWith('+')) {
      rows.push({ kind: 'add', text: line.slice(1), old: null, new: newLine === null ? null : newLine++ });
    } else if (line.startsWith('-')) {
      rows.push({ kind: 'del', text: line.slice(1), old: oldLine === null ? null : oldLine++, new: null });
    } else if (line.startsWith(' ')) {
      rows.push({
        kind: 'ctx',
        text: line.slice(1),
        old: oldLine === null ? null : oldLine++,
        new: newLine === null ? null : newLine++,
      });
    } else {
      rows.push({ kind: 'note', text: line, old: null, new: null });
    }
  }
  return rows;
}

export function countLines(text) {
  if (!text) return 0;
  const n = text.split('\n').length;
  return text.endsWith('\n') ? n - 1 : n;
}
