"""One line per log record, whatever its fields hold (docs/security.md#logs).

Every Zodex log — Sprite's ``sprite.log``, a fleet host's ``host.log``, Local's
``runtime.log``, a gateway's or worker's stderr — is written through :class:`LogFormatter`.
Its fields come from the agent and from clients (a workdir's name, a command, a worker's
stderr): a newline there would forge a log line, and an escape sequence would rewrite the
operator's terminal. So:

- every string argument of a record is escaped with :func:`escape_field` — backslashes
  doubled, every character that is not printable written as a Python escape (``\\n``,
  ``\\r``, ``\\x1b``, ``\\x85``, ``\\u2028``, ``\\u202e``); an argument can no longer be
  told apart from our own words, nor read two ways;
- the whole message then goes through :func:`escape_controls` (the same escapes, backslashes
  kept), so nothing a ``str()`` of an object brought in escapes either;
- a traceback's lines follow their record indented by two spaces: every line of the log
  that does not start with a space is a record.

``zodex … logs`` passes each line it prints through :func:`escape_controls` again, so even a
log written by something else never sends a raw control character to a terminal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

CONTINUATION: Final = "  "  # what starts each line of a traceback


def _escape(ch: str) -> str:
    return repr(ch)[1:-1]  # \n, \x1b, \u2028: Python's escape of one character


def escape_controls(text: str) -> str:
    """``text`` with every non-printable character escaped (C0 and C1 controls, DEL,
    ``\\r``, line and paragraph separators, bidi overrides and other format characters,
    unassigned code points, blanks other than the space); backslashes kept."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def escape_field(text: str) -> str:
    """A field from outside in a log line: :func:`escape_controls`, and backslashes doubled,
    so ``\\n`` in the log is always an escaped newline, never a name that held those two."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(ch if ch.isprintable() and ch != "\\" else _escape(ch) for ch in text)


def _field(value: object) -> object:
    return escape_field(value) if isinstance(value, str) else value


def escaped_message(record: logging.LogRecord) -> str:
    """The record's message with its string arguments escaped, then its controls."""
    message = str(record.msg)
    args = record.args
    if args:
        safe: Any = (
            {key: _field(value) for key, value in args.items()}
            if isinstance(args, Mapping)
            else tuple(_field(value) for value in args)
        )
        try:
            message = message % safe
        except (TypeError, ValueError):
            message = record.getMessage()  # let logging report its own formatting error
    return escape_controls(message)


class LogFormatter(logging.Formatter):
    """The formatter of every Zodex log; ``redact`` (a secret registry's) runs last."""

    def __init__(self, fmt: str, redact: Callable[[str], str] | None = None) -> None:
        super().__init__(fmt)
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        record.message = escaped_message(record)
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        blocks = [record.exc_text] if record.exc_text else []
        if record.stack_info:
            blocks.append(self.formatStack(record.stack_info))
        for block in blocks:
            text += "".join(f"\n{CONTINUATION}{escape_controls(line)}" for line in block.split("\n"))
        return text if self._redact is None else self._redact(text)


def use_for_root(
    handlers: list[logging.Handler], fmt: str, level: int, redact: Callable[[str], str] | None = None
) -> None:
    """Every record of the process through ``handlers``, each with a :class:`LogFormatter`."""
    for handler in handlers:
        handler.setFormatter(LogFormatter(fmt, redact))
    logging.basicConfig(level=level, handlers=handlers, force=True)


def log_to_stderr(fmt: str, level: int) -> None:
    """The root logger to stderr, through :class:`LogFormatter` (what ``basicConfig`` would do)."""
    use_for_root([logging.StreamHandler()], fmt, level)
