"""Keeping the runtime's own secrets out of what viewers read (docs/security.md#redaction).

A command may print the MCP token (``cat`` its file, ``env`` in the tunnel's environment,
a debug log). The model ran that command as the user and gets its output unchanged, but
everything Zodex stores or shows to a viewer — history arguments, results and output, the
observer's timeline and live events, the runtime log — must not hand a viewer who holds
only the observer bearer the key to full control. Every occurrence of a registered secret
becomes ``[redacted: zodex secret]`` there.

The :class:`SecretRegistry` knows the secrets: fixed values and files it follows, so a
rotated observer bearer is redacted at once and the value it replaced still is. Text is
redacted literally; a secret printed in pieces with other text between them, or encoded,
is not recognised.

Output is a stream cut into events at arbitrary points, so a secret can be split across
two of them. :class:`OutputRedactor` holds back the end of the text seen so far while it
could still be the start of a secret (at most ``len(secret) - 1`` characters, usually
none), and lets it go when the next text shows it is not, or when the stream ends. Results
of one session are a stream too, but one already stored cannot wait for the next:
:class:`SessionResults` masks a result's end that is the first :data:`MIN_FRAGMENT` or
more characters of a secret, and the rest of a secret at the start of the next result.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from zodex_system.log_lines import LogFormatter

REDACTED: Final = "[redacted: zodex secret]"
# Shorter values are not treated as secrets: redacting them would shred ordinary text.
MIN_SECRET_CHARS: Final = 16
# A piece of a secret this long at the end of a stored result or stream is masked too.
MIN_FRAGMENT: Final = 8
# Sessions whose last result's unfinished secret prefix is remembered.
SESSIONS_KEPT: Final = 1024


class SecretRegistry:
    """The secrets to redact. Thread-safe: the history capture redacts on its threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        # Keyed by the path as a string: each snapshot looks at every file, and a str is
        # what os.stat takes without converting a Path each time.
        self._files: dict[str, tuple[int, int, int] | None] = {}
        self._ordered: tuple[str, ...] = ()

    def add(self, secret: str) -> None:
        """A secret value; kept for the life of the process."""
        with self._lock:
            self._add(secret)

    def watch_file(self, path: Path) -> None:
        """The content of ``path`` (stripped) is a secret whenever it changes; every value
        it has held stays one, so a rotated secret is still redacted."""
        name = str(path)
        with self._lock:
            self._files.setdefault(name, None)
            self._refresh(name)

    def secrets(self) -> tuple[str, ...]:
        """Every known secret, longest first (so no secret is half-replaced by a shorter one)."""
        with self._lock:
            for name in self._files:
                self._refresh(name)
            return self._ordered

    def _add(self, secret: str) -> None:
        if len(secret) >= MIN_SECRET_CHARS and secret not in self._values:
            self._values.add(secret)
            self._ordered = tuple(sorted(self._values, key=len, reverse=True))

    def _refresh(self, name: str) -> None:
        try:
            info = os.stat(name)
        except OSError:
            return
        stamp = (info.st_mtime_ns, info.st_ino, info.st_size)
        if stamp == self._files[name]:
            return
        try:
            self._add(Path(name).read_text().strip())
        except (OSError, UnicodeDecodeError):
            return
        self._files[name] = stamp

    # -- whole values ----------------------------------------------------------------

    def snapshot(self) -> KnownSecrets:
        """The secrets known now, to redact several values with one look at the files."""
        return KnownSecrets(self.secrets())

    def redact(self, text: str) -> str:
        return self.snapshot().text(text)

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value with every string in it (keys too) redacted."""
        return self.snapshot().value(value)

    def output_stream(self) -> OutputRedactor:
        return OutputRedactor(self)


@dataclasses.dataclass(frozen=True)
class KnownSecrets:
    """The registry's secrets at one moment (longest first)."""

    secrets: tuple[str, ...]

    def text(self, text: str) -> str:
        return _replace(text, self.secrets)

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string in it (keys too) redacted."""
        return _redact_value(value, self.secrets) if self.secrets else value


def _replace(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _redact_value(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return _replace(value, secrets)
    if isinstance(value, dict):
        return {_redact_value(k, secrets): _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(v, secrets) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact_value(v, secrets) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _redact_value(getattr(value, f.name), secrets) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value


def _partial_tail(text: str, secrets: Iterable[str]) -> int:
    """The length of the longest end of ``text`` that is the start (not all) of a secret."""
    best = 0
    for secret in secrets:
        i = text.find(secret[0], max(0, len(text) - len(secret) + 1))
        while i != -1 and len(text) - i > best:
            if secret.startswith(text[i:]):
                best = len(text) - i  # the leftmost match is this secret's longest
                break
            i = text.find(secret[0], i + 1)
    return best


class OutputRedactor:
    """One output stream (a session's raw output), redacted as it arrives."""

    def __init__(self, registry: SecretRegistry) -> None:
        self._registry = registry
        self._held = ""

    def feed(self, text: str) -> str:
        """What may be stored and shown now; a possible start of a secret is held back."""
        joined = self._held + text
        secrets = self._registry.secrets()
        if not secrets:
            self._held = ""
            return joined
        clean = _replace(joined, secrets)
        keep = _partial_tail(clean, secrets)
        self._held = clean[len(clean) - keep :]
        return clean[: len(clean) - keep]

    def finish(self) -> str:
        """The stream ended: what was held back (masked if it is a long piece of a secret)."""
        rest, self._held = self._held, ""
        return REDACTED if len(rest) >= MIN_FRAGMENT else rest


class SessionResults:
    """Stored results of ``exec_command``/``write_stdin``: each session's outputs form one
    stream across calls, so a secret split between two results is masked in both."""

    def __init__(self, registry: SecretRegistry) -> None:
        self._registry = registry
        self._carried: OrderedDict[str, str] = OrderedDict()

    def redact(self, handle: str | None, result: Any, known: KnownSecrets | None = None) -> Any:
        """The result to store; ``handle`` names the session it continues or starts;
        ``known``: a snapshot the caller already took."""
        secrets = (known or self._registry.snapshot()).secrets
        if not secrets:
            return result
        if not isinstance(result, dict) or not isinstance(result.get("output"), str):
            return _redact_value(result, secrets)
        carried = self._carried.pop(handle, "") if handle else ""
        output, carried = _continue(result["output"], carried, secrets)
        if handle and result.get("status") == "running":
            self._carried[handle] = carried
            while len(self._carried) > SESSIONS_KEPT:
                self._carried.popitem(last=False)
        stored: dict[str, Any] = _redact_value(result, secrets)
        stored["output"] = output
        return stored


def _continue(text: str, carried: str, secrets: tuple[str, ...]) -> tuple[str, str]:
    """``text`` redacted as the continuation of a stream that so far ends with ``carried``
    (the start of a secret, already stored); returns it and what it now ends with."""
    joined = carried + text
    start = len(carried)
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        i = joined.find(secret)
        while i != -1:
            spans.append((i, i + len(secret)))
            i = joined.find(secret, i + 1)
    keep = _partial_tail(joined, secrets)
    if keep >= MIN_FRAGMENT:
        spans.append((len(joined) - keep, len(joined)))
    merged: list[tuple[int, int]] = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    pieces: list[str] = []
    position = start
    for low, high in merged:
        low = max(low, start)
        if high <= low:
            continue  # wholly in the earlier result, which dealt with it
        pieces += [joined[position:low], REDACTED]
        position = high
    pieces.append(joined[position:])
    return "".join(pieces), joined[len(joined) - keep :]


class RedactingFormatter(LogFormatter):
    """The one log formatter (fields escaped, one line per record), with the registry's
    secrets replaced in the lines and their tracebacks."""

    def __init__(self, fmt: str, registry: SecretRegistry) -> None:
        super().__init__(fmt, registry.redact)


# The process's registry: the MCP token and observer bearer of the Local runtime, an HTTP
# gateway's token, and whatever later secret is added with add() or watch_file().
SECRETS: Final = SecretRegistry()


def watch_secret_files(paths: Iterable[Path], registry: SecretRegistry = SECRETS) -> None:
    """Secrets kept in files (Local's MCP token and observer bearer, whose viewers read the
    history this process writes): redacted whoever wrote them, and followed when they change."""
    for path in paths:
        registry.watch_file(path)
