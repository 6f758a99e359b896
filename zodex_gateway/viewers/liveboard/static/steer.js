// The box on a running command's card through which a person types into its terminal
// (observer.steer on). Enter sends the line with a carriage return; the key buttons send one
// key each. What was typed is not kept here: the field is cleared once the input is sent.
// "Take over" keeps the model's characters out until the person gives the session back; the
// button shows what this page last did.

import * as api from './api.js';
import { h } from './dom.js';

// The bytes a terminal sends for each key.
export const KEYS = Object.freeze([
  { id: 'ctrl-c', label: 'Ctrl-C', chars: '\x03', title: 'interrupt' },
  { id: 'ctrl-d', label: 'Ctrl-D', chars: '\x04', title: 'end of input' },
  { id: 'tab', label: 'Tab', chars: '\t' },
  { id: 'esc', label: 'Esc', chars: '\x1b' },
  { id: 'up', label: '↑', chars: '\x1b[A', title: 'arrow up' },
  { id: 'down', label: '↓', chars: '\x1b[B', title: 'arrow down' },
  { id: 'right', label: '→', chars: '\x1b[C', title: 'arrow right' },
  { id: 'left', label: '←', chars: '\x1b[D', title: 'arrow left' },
]);

function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

export function typedMessage(reply) {
  const what = plural(reply.chars, 'character');
  return reply.hidden ? `typed ${what}, hidden (echo was off): recorded only as a count` : `typed ${what}`;
}

export class SteerBox {
  constructor(handle) {
    this.handle = handle;
    this.input = h('input', {
      class: 'steer-input',
      'data-testid': 'steer-input',
      type: 'text',
      autocomplete: 'off',
      spellcheck: 'false',
      'aria-label': 'Type into this command',
      placeholder: 'Type into this command — Enter sends the line',
    });
    this.hide = h('input', { type: 'checkbox', 'data-testid': 'steer-hide' });
    this.hide.addEventListener('change', () => {
      this.input.type = this.hide.checked ? 'password' : 'text';
    });
    this.status = h('span', { class: 'steer-status', 'data-testid': 'steer-status', role: 'status' });
    this.taken = false;
    this.takeButton = h('button', {
      type: 'button',
      class: 'steer-take',
      'data-testid': 'steer-take',
      title: "Refuse the model's characters until you give the session back",
      text: 'Take over',
      onclick: () => this.toggleTakeOver(),
    });
    const keys = KEYS.map((key) =>
      h('button', {
        type: 'button',
        class: 'steer-key',
        'data-testid': 'steer-key',
        'data-key': key.id,
        title: key.title || key.label,
        text: key.label,
        onclick: () => this.send(key.chars),
      }),
    );
    this.el = h(
      'form',
      { class: 'steer', 'data-testid': 'steer', onsubmit: (event) => this.submit(event) },
      h(
        'div',
        { class: 'steer-line' },
        this.input,
        h('button', { type: 'submit', class: 'steer-send', 'data-testid': 'steer-send', text: 'Send ⏎' }),
      ),
      h(
        'div',
        { class: 'steer-keys' },
        ...keys,
        this.takeButton,
        h('label', { class: 'steer-hide', title: 'Show dots instead of what you type' }, this.hide, 'hide'),
        this.status,
      ),
    );
  }

  submit(event) {
    event.preventDefault();
    const line = this.input.value;
    this.send(`${line}\r`, () => {
      this.input.value = '';
    });
  }

  async toggleTakeOver() {
    this.status.dataset.state = 'sending';
    this.status.textContent = 'sending…';
    try {
      const reply = await api.takeOver(this.handle, !this.taken);
      this.taken = reply.taken_over;
      this.takeButton.textContent = this.taken ? 'Give back' : 'Take over';
      this.takeButton.classList.toggle('active', this.taken);
      this.status.dataset.state = 'sent';
      this.status.textContent = this.taken ? 'taken over: the model can only watch' : 'given back to the model';
    } catch (error) {
      this.status.dataset.state = 'error';
      this.status.textContent = error.message;
    }
  }

  async send(chars, onSent) {
    this.status.dataset.state = 'sending';
    this.status.textContent = 'sending…';
    try {
      const reply = await api.typeInto(this.handle, chars);
      if (onSent) onSent();
      this.status.dataset.state = 'sent';
      this.status.textContent = typedMessage(reply);
    } catch (error) {
      this.status.dataset.state = 'error';
      this.status.textContent = error.message;
    }
    this.input.focus();
  }
}
