"""One session's output: raw PTY bytes in; deltas, previews and a spill file out.

Memory stays bounded whatever the volume (docs/output.md#spill-files): the stream's first ``inline_limit``
characters are kept only until the spill file exists, the undelivered text is cut down to
its first ``preview_head_chars`` and last characters (``preview_chars`` in all) as soon as
it is known to exceed ``inline_limit`` (the next delta is then a preview anyway), and the
cleaner bounds its pending line and escape sequences. Roughly ``2 * inline_limit`` plus one
read chunk plus the cleaner's bounds, per session.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Final

from zodex_protocol.replies import SpilledOutput
from zodex_protocol.wait_pattern import WaitPattern
from zodex_system.terminal_text import TerminalCleaner
from zodex_worker.output.spill import DEFAULT_FILE_CAP_BYTES, SPILL_SUFFIX, SpillFile
from zodex_worker.output.watch import OutputWatch

__all__ = ["DEFAULT_INLINE_LIMIT", "DEFAULT_PREVIEW_CHARS", "SessionOutput"]

DEFAULT_INLINE_LIMIT: Final = 16000
DEFAULT_PREVIEW_CHARS: Final = 4000


class SessionOutput:
    """The output state of one session.

    Counts describe the *committed* cleaned stream: complete lines, plus partial lines
    committed by :meth:`take_delta`, plus Zodex notices. ``output_lines`` is the number of
    ``\\n`` plus one when the stream is non-empty and does not end in ``\\n`` (an
    unterminated last line still counts as a line), so ``"a\\nb"`` has 2 lines, ``"a\\n"``
    has 1 and ``""`` has 0.

    Not thread-safe: the session's owner serialises calls (docs/sessions.md#concurrency).
    """

    def __init__(
        self,
        *,
        spill_dir: Path,
        spill_name: str,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        preview_chars: int = DEFAULT_PREVIEW_CHARS,
        preview_head_chars: int | None = None,  # default: a quarter of preview_chars
        file_cap_bytes: int = DEFAULT_FILE_CAP_BYTES,
    ) -> None:
        if inline_limit < 0 or not 0 <= preview_chars <= inline_limit:
            raise ValueError("need 0 <= preview_chars <= inline_limit")
        if preview_head_chars is None:
            preview_head_chars = preview_chars // 4
        if not 0 <= preview_head_chars <= preview_chars:
            raise ValueError("need 0 <= preview_head_chars <= preview_chars")
        if not spill_name or spill_name in {".", ".."} or "/" in spill_name or "\\" in spill_name:
            raise ValueError(f"spill_name must be a plain file name: {spill_name!r}")
        self._inline_limit = inline_limit
        self._preview_chars = preview_chars
        self._head_chars = preview_head_chars
        self._tail_chars = preview_chars - preview_head_chars
        self._file_cap_bytes = file_cap_bytes
        self._spill_path = (spill_dir / f"{spill_name}{SPILL_SUFFIX}").absolute()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._cleaner = TerminalCleaner()
        # The whole committed stream so far.
        self._chars = 0
        self._newlines = 0
        self._ends_with_newline = False
        # The stream's beginning, kept until it passes inline_limit and goes to the file.
        self._head: list[str] = []
        self._spilled = False
        self._spill: SpillFile | None = None
        self._spill_error: str | None = None  # why the spill file could not be made
        # Text not yet in a delta: _pending_* count all of it, _buffer holds all of it or,
        # once it is known to exceed inline_limit, at least its last characters for the
        # preview's tail (and one before them), _delta_head then its first ones.
        self._buffer: list[str] = []
        self._buffered_chars = 0
        self._pending_chars = 0
        self._pending_newlines = 0
        self._pending_bytes = 0
        self._delta_head: str | None = None
        self._last_char = ""  # of the committed stream
        self._delivered_last = ""  # the last character of the last delta
        self._watch: OutputWatch | None = None

    # -- input --------------------------------------------------------------------------

    def feed(self, data: bytes) -> str:
        """Take raw PTY bytes; return the raw decoded text (escapes intact) for the events.

        A UTF-8 character split across reads is kept whole; invalid bytes become U+FFFD.
        """
        raw = self._decoder.decode(data)
        if raw:
            self._commit(self._cleaner.feed(raw))
        return raw

    def add_notice(self, text: str) -> None:
        """Append Zodex's own line (a timeout notice) to the cleaned stream, on its own line."""
        self._commit(self._cleaner.insert_line(text))

    def finish(self) -> str:
        """End of stream: flush the decoder and the cleaner; return remaining raw text."""
        raw = self._decoder.decode(b"", final=True)
        committed = self._cleaner.feed(raw) if raw else ""
        self._commit(committed + self._cleaner.finish())
        return raw

    # -- output -------------------------------------------------------------------------

    def has_undelivered(self) -> bool:
        """Whether cleaned text (committed or a pending partial line) awaits a delta."""
        return self._pending_chars > 0 or self._cleaner.has_partial()

    @property
    def pending_chars(self) -> int:
        """Characters of cleaned text awaiting a delta (committed; a partial line not yet)."""
        return self._pending_chars

    def take_delta(self) -> str:
        """The cleaned text since the previous delta, the partial line included.

        Longer than ``inline_limit``: a preview, its head and tail around a marker line
        (docs/output.md#deltas-and-previews).
        """
        self._commit(self._cleaner.flush_partial())
        total = self._pending_chars
        if total == 0:
            return ""
        text = "".join(self._buffer)
        head, newlines, size = self._delta_head, self._pending_newlines, self._pending_bytes
        self._buffer.clear()
        self._buffered_chars = 0
        self._pending_chars = self._pending_newlines = self._pending_bytes = 0
        self._delta_head = None
        self._delivered_last = text[-1]
        if total <= self._inline_limit or head is None:
            return text
        head = _head_lines(head)
        tail = _tail_lines(text, self._tail_chars)
        lines = newlines - head.count("\n") - tail.count("\n")
        omitted = size - _utf8_size(head) - _utf8_size(tail)
        noun = "line" if lines == 1 else "lines"
        marker = f"[zodex] … {lines:,} {noun}, {_size_omitted(omitted)} omitted; {self._where()}\n"
        if head and not head.endswith("\n"):
            marker = "\n" + marker
        return head + marker + tail

    def _where(self) -> str:
        """Where the whole output is, as the preview's marker line ends."""
        path = self._spill_path
        if self._spill is None:
            reason = f" ({self._spill_error})" if self._spill_error is not None else ""
            return f"the whole output was not saved{reason}"
        if self._spill.error is not None:
            return f"the whole output is in {path}, cut short ({self._spill.error})"
        if self._spill.truncated:  # at the cap: the file holds the stream's beginning only
            return f"the first {size_text(self._spill.cap_bytes)} of the output is in {path}"
        return f"the whole output is in {path}"

    # -- waiting for a pattern ------------------------------------------------------------

    def watch(self, pattern: WaitPattern, *, after_typing: bool = False) -> OutputWatch:
        """Start matching ``pattern`` against new output (docs/tools.md#waiting-for-output).

        New output is what no result has carried yet (already searched here, so a match
        that came before the call counts), or, ``after_typing``, only what comes from now
        on: the pending line is committed first, so the answer to what is typed is matched,
        not the prompt it was typed at.
        """
        if after_typing:
            self._commit(self._cleaner.flush_partial())
            watch = OutputWatch(pattern, self._last_char)
        else:
            watch = OutputWatch(pattern, self._delivered_last)
            if self._delta_head is not None:  # the tail kept below does not follow it
                watch.search_apart(self._delta_head)
            watch.add("".join(self._buffer))
        self._watch = watch
        return watch

    def check_watch(self) -> bool:
        """Whether the watched pattern matched the output so far, pending line included."""
        return self._watch is not None and self._watch.check(self._cleaner.pending_line())

    def unwatch(self) -> OutputWatch | None:
        """Stop watching; the watch that was, if any."""
        watch, self._watch = self._watch, None
        return watch

    def spilled(self) -> SpilledOutput | None:
        """Result fields once the stream passed ``inline_limit`` (docs/output.md#spill-files), else ``None``.

        Without a spill file (it could not be created) only the counts are given.
        """
        if not self._spilled:
            return None
        lines = self._newlines + (1 if self._chars and not self._ends_with_newline else 0)
        if self._spill is None:
            return SpilledOutput(
                output_chars=self._chars, output_lines=lines, output_file_error=self._spill_error
            )
        return SpilledOutput(
            output_chars=self._chars,
            output_lines=lines,
            output_file=str(self._spill_path),
            output_file_truncated=self._spill.truncated,
            # Cut short by the disk, not by the size cap (docs/output.md#spill-files).
            output_file_error=self._spill.error,
        )

    @property
    def held_chars(self) -> int:
        """Characters of output this session holds in memory (for the bound, and tests)."""
        return sum(map(len, self._head)) + self._buffered_chars + self._cleaner.held_chars

    def close(self) -> None:
        """Close the spill file descriptor; the file stays on disk. Idempotent."""
        if self._spill is not None:
            self._spill.close()

    # -- internals ----------------------------------------------------------------------

    def _commit(self, text: str) -> None:
        if not text:
            return
        n = len(text)
        newlines = text.count("\n")
        self._chars += n
        self._newlines += newlines
        self._last_char = text[-1]
        self._ends_with_newline = self._last_char == "\n"
        if self._watch is not None:
            self._watch.add(text)
        if self._spill is not None:
            self._spill.write(text)
        elif not self._spilled:
            if self._chars > self._inline_limit:
                self._start_spill(text)
            else:
                self._head.append(text)

        self._buffer.append(text)
        self._buffered_chars += n
        self._pending_chars += n
        self._pending_newlines += newlines
        self._pending_bytes += n if text.isascii() else _utf8_size(text)
        if self._pending_chars > self._inline_limit and self._buffered_chars > self._inline_limit:
            # The next delta is a preview now: only its head and tail can still be shown.
            joined = "".join(self._buffer)
            if self._delta_head is None:  # the buffer held the whole delta until now
                self._delta_head = joined[: self._head_chars]
            # One character more than the tail: whether the tail starts a line.
            keep = joined[len(joined) - self._tail_chars - 1 :]
            self._buffer = [keep]
            self._buffered_chars = len(keep)

    def _start_spill(self, text: str) -> None:
        self._spilled = True
        head = "".join(self._head)
        self._head = []
        try:
            spill = SpillFile(self._spill_path, cap_bytes=self._file_cap_bytes)
        except OSError as exc:
            # No file (read-only state dir, full disk): keep serving previews without it.
            self._spill_error = exc.strerror or str(exc)
            return
        self._spill = spill
        spill.write(head)
        spill.write(text)


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))


def _head_lines(head: str) -> str:
    """The preview's head, ending at a line end when one lies in its second half (a line
    cut short is kept only when the cut would lose more than half the head)."""
    end = head.rfind("\n")
    return head[: end + 1] if end >= len(head) // 2 else head


def _tail_lines(text: str, chars: int) -> str:
    """The last ``chars`` of ``text``, starting at a line start when one lies in the first
    half of them (``text`` holds at least one character before them, once trimmed)."""
    if chars == 0:
        return ""
    tail = text[len(text) - chars :]
    if len(text) > chars and text[len(text) - chars - 1] != "\n":
        start = tail.find("\n")
        if 0 <= start < len(tail) // 2:
            tail = tail[start + 1 :]
    return tail


def _size_omitted(size: int) -> str:
    """A byte count in decimal units, one decimal: ``512 bytes``, ``3.1 MB``."""
    for unit, name in ((10**9, "GB"), (10**6, "MB"), (10**3, "kB")):
        if size >= unit:
            return f"{size / unit:.1f} {name}"
    return "1 byte" if size == 1 else f"{size} bytes"


def size_text(size: int) -> str:
    """A byte count as the docs write it: ``16 MiB``, ``512 KiB``, else ``N bytes``."""
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"
