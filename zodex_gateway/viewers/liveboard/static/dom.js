// Building DOM from API data. Text always goes in as text nodes or textContent, never as
// markup: commands, output and paths come from agents and must not become HTML.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (typeof value === 'boolean') el.toggleAttribute(key, value);
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function replaceChildren(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// Paths are cut at their start when too long (their end is what tells them apart): the
// box runs right to left, the text inside it stays left to right.
export function startEllipsis(el, text) {
  el.classList.add('start-ellipsis');
  el.replaceChildren(h('bdi', { dir: 'ltr', text }));
  return el;
}
