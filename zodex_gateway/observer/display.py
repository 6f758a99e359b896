"""What a person reads of a command's output: cleaned, then redacted (docs/security.md#redaction).

Stored output is redacted as raw text. Cleaning then removes escape sequences, controls and
bidi characters, so a secret printed with one of them between its halves (``abc\\x1b[0mdef``)
is not in the raw text but is whole in the cleaned one. Every cleaned view — the display
view of ``/v1/invocations/{id}/output``, a record's ``output_tail``, live ``display_text`` —
is therefore redacted again after cleaning, by the same rule as the raw text.
"""

from __future__ import annotations

from zodex_gateway.redaction import SECRETS, OutputRedactor, SecretRegistry
from zodex_system.terminal_text import TerminalCleaner


def shown_text(raw: str, *, ended: bool, secrets: SecretRegistry = SECRETS) -> str:
    """The cleaned, redacted text of ``raw`` (stored output, already redacted as raw). While
    the command may still print (``ended`` False), a possible start of a secret at the end is
    left out, as the live stream holds it back: the next read shows it, redacted or not."""
    cleaner = TerminalCleaner()
    stream = secrets.output_stream()
    text = stream.feed(cleaner.feed(raw) + cleaner.finish())
    return text + stream.finish() if ended else text


class DisplayStream:
    """One session's live ``display_text``: cleaned as it arrives, then redacted as a stream,
    so a secret whose halves the cleaner joins across two events is caught too."""

    def __init__(self, secrets: SecretRegistry = SECRETS) -> None:
        self._cleaner = TerminalCleaner()
        self._redactor: OutputRedactor = secrets.output_stream()

    def feed(self, raw: str) -> str:
        return self._redactor.feed(self._cleaner.feed(raw))

    def finish(self) -> str:
        """The process ended: the cleaner's unterminated rest and what redaction held back."""
        return self._redactor.feed(self._cleaner.finish()) + self._redactor.finish()
