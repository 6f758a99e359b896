"""One session's output: raw PTY bytes in; deltas, tail previews and a spill file out.

Memory stays bounded whatever the volume (docs/output.md#spill-files): the stream's first ``inline_limit``
characters are kept only until the spill file exists, the undelivered text is cut down to
its last ``preview_chars`` characters as soon as it is known to exceed ``inline_limit``
(the next delta is then a preview anyway), and the cleaner bounds its pending line and
escape sequences. Roughly ``2 * inline_limit`` plus one read chunk plus the cleaner's
bounds, per session.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Final

from zodex_protocol.replies import SpilledOutput
from zodex_system.terminal_text import TerminalCleaner
from zodex_worker.output.spill import DEFAULT_FILE_CAP_BYTES, SPILL_SUFFIX, SpillFile

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
        file_cap_bytes: int = DEFAULT_FILE_CAP_BYTES,
    ) -> None:
        if inline_limit < 0 or not 0 <= preview_chars <= inline_limit:
            raise ValueError("need 0 <= preview_chars <= inline_limit")
        if not spill_name or spill_name in {".", ".."} or "/" in spill_name or "\\" in spill_name:
            raise ValueError(f"spill_name must be a plain file name: {spill_name!r}")
        self._inline_limit = inline_limit
        self._preview_chars = preview_chars
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
        # Text not yet in a delta: _pending_chars counts all of it, _buffer holds all of it
        # or, once it is known to exceed inline_limit, at least its last preview_chars.
        self._buffer: list[str] = []
        self._buffered_chars = 0
        self._pending_chars = 0

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

        Longer than ``inline_limit``: a one-line notice, then the last ``preview_chars``.
        """
        self._commit(self._cleaner.flush_partial())
        total = self._pending_chars
        if total == 0:
            return ""
        text = "".join(self._buffer)
        self._buffer.clear()
        self._buffered_chars = 0
        self._pending_chars = 0
        if total <= self._inline_limit:
            return text
        tail = text[len(text) - self._preview_chars :]
        if self._spill is None:
            where = "full output not saved"
            if self._spill_error is not None:
                where += f" ({self._spill_error})"
        elif self._spill.error is not None:
            where = f"full output in {self._spill_path}, cut short ({self._spill.error})"
        elif self._spill.truncated:  # at the cap: the file holds the stream's beginning only
            where = f"the first {size_text(self._spill.cap_bytes)} of the output in {self._spill_path}"
        else:
            where = f"full output in {self._spill_path}"
        notice = f"[zodex] {total - len(tail)} characters omitted; showing the last {len(tail)}; {where}\n"
        return notice + tail

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
        self._chars += n
        self._newlines += text.count("\n")
        self._ends_with_newline = text[-1] == "\n"
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
        if self._pending_chars > self._inline_limit and self._buffered_chars > self._inline_limit:
            # The next delta is a preview now: only its tail can still be shown.
            joined = "".join(self._buffer)
            keep = joined[len(joined) - self._preview_chars :]
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


def size_text(size: int) -> str:
    """A byte count as the docs write it: ``16 MiB``, ``512 KiB``, else ``N bytes``."""
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"
