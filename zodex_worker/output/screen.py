"""One session's terminal screen, as a terminal would show it (docs/output.md#screens).

A VT emulator (pyte) costs about a second per 200 kB of scrolling lines, so it is fed only
while it is needed: it starts at the first output that switches to the alternate screen,
moves the cursor to another row or clears the screen, and is dropped again once the main
screen scrolled :data:`PLAIN_LINES` lines (or took :data:`PLAIN_CHARS` characters) with no
redraw: the program went back to printing lines. A plain stream (``seq``, a build log)
never reaches it and costs one substring search per read.

Not thread-safe: the session's owner serialises calls, as for :class:`SessionOutput`.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any, Final

import pyte
from pyte import modes
from pyte.screens import StaticDefaultDict

from zodex_protocol.replies import TerminalScreen

__all__ = ["PLAIN_CHARS", "PLAIN_LINES", "SessionScreen"]

# Output on the main screen with no redraw after which the emulator is dropped.
PLAIN_LINES: Final = 100  # scrolled lines: two screens of a 50-row terminal
PLAIN_CHARS: Final = 64 * 1024
# Output kept before the emulator starts, replayed into it: what a program that draws on
# the main screen without clearing it first (a REPL's status line) draws over.
RECENT_CHARS: Final = 8 * 1024
TITLE_CHARS: Final = 200  # of a window title, at most
# The alternate screen: xterm's private modes 47, 1047 and 1049 (pyte shifts private ones).
_ALTERNATE_MODES: Final = frozenset({47 << 5, 1047 << 5, 1049 << 5})
_IGNORED_MODES: Final = _ALTERNATE_MODES | {modes.DECCOLM}
# What may start a screen: CUP and HVP (``ESC [ row ; col H`` / ``f``), VPA (``d``), cursor
# up (``A``), erase display (``J``), a scroll region (``r``), reverse index (``ESC M``) and
# a switch to or from the alternate screen.
_DRAWS: Final = re.compile(r"\x1b\[[0-9;]*[HfdAJr]|\x1bM|\x1b\[\?(?:1049|1047|47)[hl]")


class _Screen(pyte.Screen):
    """pyte's screen with the alternate screen, which pyte leaves out."""

    def __init__(self, columns: int, lines: int) -> None:
        super().__init__(columns, lines)
        self.alternate = False
        # Set on leaving the alternate screen, for the owner to take: the counts at that
        # moment (what came after it in the same read counts for the main screen).
        self.left_alternate: tuple[int, int] | None = None
        self._main: Any = None  # the main screen's buffer while the alternate one shows
        # Ever-growing counts the owner takes differences of: a redraw is a move of the
        # cursor to an earlier row or a clear of the whole screen; scrolled lines are lines
        # pushed off the top, what printing lines does once the screen is full.
        self.redraws = 0
        self.scrolled = 0

    def index(self) -> None:
        bottom = self.margins.bottom if self.margins else self.lines - 1
        if self.cursor.y == bottom:
            self.scrolled += 1
        super().index()

    def cursor_position(self, line: int | None = None, column: int | None = None) -> None:
        row = self.cursor.y
        super().cursor_position(line, column)
        self._moved_from(row)

    def cursor_to_line(self, line: int | None = None) -> None:
        row = self.cursor.y
        super().cursor_to_line(line)
        self._moved_from(row)

    def cursor_up(self, count: int | None = None) -> None:
        row = self.cursor.y
        super().cursor_up(count)
        self._moved_from(row)

    def reverse_index(self) -> None:
        self.redraws += 1
        super().reverse_index()

    def erase_in_display(self, how: int = 0, *args: Any, **kwargs: Any) -> None:
        if how in (2, 3):
            self.redraws += 1
        super().erase_in_display(how, *args, **kwargs)

    def text_rows(self) -> list[str]:
        """The rows as text, trailing spaces trimmed. pyte's ``display`` looks up every cell
        and its width (7 ms for 50x200); this joins the cells written, whose wide
        characters already hold an empty stub after them."""
        rows = []
        for y in range(self.lines):
            line = self.buffer.get(y)
            if not line:
                rows.append("")
                continue
            cells = [" "] * min(max(line) + 1, self.columns)
            for x, char in line.items():
                if x < self.columns:
                    cells[x] = char.data
            rows.append("".join(cells).rstrip())
        return rows

    def set_title(self, param: str) -> None:
        super().set_title(param[:TITLE_CHARS])  # a result stays bounded whatever is sent

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        # ``ESC [ > 4 ; 2 m`` (xterm's modifyOtherKeys, which vim sends) is no rendition;
        # pyte passes it here as private and would raise.
        if not private:
            super().select_graphic_rendition(*attrs)

    def _moved_from(self, row: int) -> None:
        if self.cursor.y < row:
            self.redraws += 1

    def set_mode(self, *modes_: int, **kwargs: Any) -> None:
        self._switch_modes(modes_, kwargs, self._enter_alternate, super().set_mode)

    def reset_mode(self, *modes_: int, **kwargs: Any) -> None:
        self._switch_modes(modes_, kwargs, self._leave_alternate, super().reset_mode)

    def _switch_modes(
        self,
        modes_: tuple[int, ...],
        kwargs: dict[str, Any],
        alternate: Callable[[bool], None],
        pyte_switch: Callable[..., None],
    ) -> None:
        """Setting and resetting alike: the alternate screen is switched here (mode 1049
        with the cursor saved or restored), the modes kept go to pyte."""
        if kwargs.get("private") and self._alternate_switch(modes_):
            alternate(1049 in modes_)
        kept = self._kept(modes_, kwargs)
        if kept:
            pyte_switch(*kept, **kwargs)

    @staticmethod
    def _alternate_switch(modes_: tuple[int, ...]) -> bool:
        return any(mode << 5 in _ALTERNATE_MODES for mode in modes_)

    @staticmethod
    def _kept(modes_: tuple[int, ...], kwargs: dict[str, Any]) -> tuple[int, ...]:
        """The modes left for pyte: not the alternate screen (handled here), nor DECCOLM,
        which would switch pyte to 132 columns while the PTY's width stays."""
        if not kwargs.get("private"):
            return modes_
        return tuple(mode for mode in modes_ if mode << 5 not in _IGNORED_MODES)

    def _enter_alternate(self, saves_cursor: bool) -> None:
        if self.alternate:
            return
        if saves_cursor:
            self.save_cursor()
        self._main = self.buffer
        self.buffer = defaultdict(lambda: StaticDefaultDict(self.default_char))
        self.alternate = True

    def _leave_alternate(self, restores_cursor: bool) -> None:
        if not self.alternate:
            return
        self.buffer = self._main
        self._main = None
        self.alternate = False
        self.left_alternate = (self.redraws, self.scrolled)
        self.dirty.update(range(self.lines))
        if restores_cursor:
            self.restore_cursor()


class _Stream(pyte.Stream):
    """pyte's parser, taking charset designations as xterm and tmux do in UTF-8 too: curses
    draws its boxes with ``ESC ( 0`` (DEC line drawing), which pyte ignores in UTF-8 mode.
    The text comes decoded already, so the mode has nothing else to do here."""

    def __init__(self, screen: pyte.Screen) -> None:
        super().__init__(screen)
        self.use_utf8 = False

    def select_other_charset(self, code: str) -> None:
        pass  # ``ESC % G`` would turn the designations off again


# An operating-system command (a title) left open this long drops the emulator: its parser
# would otherwise hold every character until a terminator that may never come.
OPEN_OSC_CHARS = 4096


def _open_osc_after(raw: str, open_chars: int) -> int:
    """How many characters of an unterminated OSC end ``raw`` (0: none is open)."""
    start = max(raw.rfind("\x1b]"), raw.rfind("\x9d"))
    end = max(raw.rfind("\x07"), raw.rfind("\x1b\\"), raw.rfind("\x9c"))
    if start > end:
        return len(raw) - start
    if end >= 0:
        return 0
    return open_chars + len(raw) if open_chars else 0


class SessionScreen:
    """The terminal model of one session's PTY, kept only while a program draws on it."""

    def __init__(self, rows: int, columns: int) -> None:
        self._rows = rows
        self._columns = columns
        self._screen: _Screen | None = None
        self._stream: _Stream | None = None
        # The last reads (RECENT_CHARS and at most one read more), kept by reference: a
        # flood's reads cost an append, not a copy.
        self._recent: deque[str] = deque()
        self._recent_chars = 0
        # Main-screen output since the last redraw: when to drop the emulator.
        self._plain_lines = self._plain_chars = 0
        # The screen's counts when the previous result was taken: the rule's "since".
        self._taken_redraws = self._taken_scrolled = 0
        self._showing = False  # the previous result showed the screen
        self._open_osc = 0  # characters of a title sequence not yet terminated

    @property
    def active(self) -> bool:
        """Whether the emulator is being fed (for tests and the bench)."""
        return self._screen is not None

    def feed(self, raw: str) -> None:
        """Take the decoded raw output (escapes intact) of one read."""
        if self._screen is None:
            if "\x1b" not in raw or not _DRAWS.search(raw):
                self._remember(raw)
                return
            self._start()
            raw = "".join(self._recent)[-RECENT_CHARS:] + raw
            self._recent.clear()
            self._recent_chars = 0
        screen, stream = self._screen, self._stream
        assert screen is not None and stream is not None
        redraws, scrolled = screen.redraws, screen.scrolled
        try:
            stream.feed(raw)
        except Exception:  # the emulator must never cost the session its output
            # A sequence pyte cannot take leaves its parser dead: start afresh at the next draw.
            self._stop()
            return
        self._open_osc = _open_osc_after(raw, self._open_osc)
        if self._open_osc > OPEN_OSC_CHARS:
            self._stop()
            return
        if screen.left_alternate is not None:
            # What the full-screen program drew is gone: count the main screen afresh.
            self._taken_redraws, self._taken_scrolled = screen.left_alternate
            screen.left_alternate = None
            self._showing = False
        if screen.alternate or screen.redraws != redraws:
            self._plain_lines = self._plain_chars = 0
            return
        self._plain_lines += screen.scrolled - scrolled
        self._plain_chars += len(raw)
        if self._plain_lines > PLAIN_LINES or self._plain_chars > PLAIN_CHARS:
            self._stop()

    def take(self) -> TerminalScreen | None:
        """The screen for a result, when it is to be shown: the alternate screen, or a main
        screen that output since the previous result redrew (moved the cursor up or cleared
        it) without scrolling a screenful of lines, or one the previous result showed that
        no line has scrolled since. Starts the count for the next result."""
        screen = self._screen
        if screen is None:
            return None
        redraws = screen.redraws - self._taken_redraws
        scrolled = screen.scrolled - self._taken_scrolled
        self._taken_redraws, self._taken_scrolled = screen.redraws, screen.scrolled
        # A screen once shown stays shown until lines scroll: a poll of a quiet ``top`` or
        # of a dialog waiting for its key still shows it.
        self._showing = (
            screen.alternate or (redraws > 0 and scrolled < self._rows) or (self._showing and scrolled == 0)
        )
        if not self._showing:
            return None
        rows = screen.text_rows()
        while rows and not rows[-1]:
            rows.pop()
        return TerminalScreen(
            rows=tuple(rows),
            cursor=(screen.cursor.y, screen.cursor.x),
            title=screen.title,
            alternate=screen.alternate,
            size=(self._rows, self._columns),
        )

    def _remember(self, raw: str) -> None:
        self._recent.append(raw)
        self._recent_chars += len(raw)
        while self._recent_chars - len(self._recent[0]) >= RECENT_CHARS:
            self._recent_chars -= len(self._recent.popleft())

    def _start(self) -> None:
        self._screen = _Screen(self._columns, self._rows)
        self._stream = _Stream(self._screen)
        self._plain_lines = self._plain_chars = 0
        self._taken_redraws = self._taken_scrolled = 0
        self._showing = False

    def _stop(self) -> None:
        self._screen = self._stream = None
        self._open_osc = 0
        self._plain_lines = self._plain_chars = 0
        self._taken_redraws = self._taken_scrolled = 0
        self._showing = False
