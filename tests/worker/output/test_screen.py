"""docs/output.md#screens: when a session's terminal model runs, and when a result shows it.

The screens themselves are compared with tmux's on real programs in
tests/integration/test_screens.py; these check the rule on hand-written output.
"""

from __future__ import annotations

import pyte
import pytest

from zodex_protocol.replies import SessionResult, TerminalScreen
from zodex_worker.output.screen import PLAIN_LINES, SessionScreen

ROWS, COLS = 50, 200


def lines(start: int, count: int) -> str:
    return "".join(f"{i}\r\n" for i in range(start, start + count))


def test_plain_lines_never_start_the_emulator() -> None:
    screen = SessionScreen(ROWS, COLS)
    screen.feed(lines(1, 5000))
    screen.feed("\x1b[1;31mred\x1b[0m and a \x1b[K erased line\r\nprogress 10%\rprogress 90%\r\n")
    assert not screen.active
    assert screen.take() is None


def test_the_alternate_screen_is_shown_and_leaving_it_restores_the_main_screen() -> None:
    screen = SessionScreen(ROWS, COLS)
    screen.feed("before\r\n")
    screen.feed("\x1b[?1049h\x1b[H\x1b[2J\x1b]0;my title\x07top row   \x1b[50;1Hbottom")
    shown = screen.take()
    assert shown == TerminalScreen(
        rows=("top row", *[""] * 48, "bottom"),
        cursor=(49, 6),
        title="my title",
        alternate=True,
        size=(50, 200),
    )
    # A poll with no new output still shows it: the program is still in the alternate screen.
    assert screen.take() == shown
    screen.feed("\x1b[?1049l")
    assert screen.take() is None  # back to the main screen, nothing redrawn there since
    screen.feed("\x1b[H\x1b[2J")
    again = screen.take()
    assert again is not None and not again.alternate and again.rows == ()


def test_the_recent_output_is_replayed_when_the_emulator_starts() -> None:
    screen = SessionScreen(ROWS, COLS)
    screen.feed("line one\r\nline two\r\n")
    screen.feed("\x1b[1A\x1b[Kline TWO\r\n")  # a redraw of the row above
    shown = screen.take()
    assert shown is not None and shown.rows == ("line one", "line TWO") and shown.cursor == (2, 0)


def test_a_redraw_followed_by_a_screenful_of_lines_is_line_output() -> None:
    screen = SessionScreen(ROWS, COLS)
    screen.feed("\x1b[H\x1b[2J" + lines(1, 2 * ROWS))  # clear, then a screenful scrolls off
    assert screen.take() is None
    screen.feed("\x1b[H\x1b[2J" + lines(1, 10))  # a short redraw is a screen
    shown = screen.take()
    assert shown is not None and shown.rows == tuple(str(i) for i in range(1, 11))


def test_the_emulator_is_dropped_once_the_program_prints_lines_again() -> None:
    screen = SessionScreen(ROWS, COLS)
    screen.feed("\x1b[H\x1b[2Jdrawn")
    assert screen.active
    screen.feed(lines(1, ROWS - 1 + PLAIN_LINES))  # scrolls PLAIN_LINES exactly
    assert screen.active
    screen.feed("one more line\r\n")
    assert not screen.active and screen.take() is None
    # In the alternate screen it stays, however much is printed.
    screen.feed("\x1b[?1049h")
    for start in range(0, 10 * PLAIN_LINES, ROWS):
        screen.feed(lines(start, ROWS))
    assert screen.active and screen.take() is not None


def test_the_screen_survives_the_wire() -> None:
    screen = TerminalScreen(rows=("a", "", "b"), cursor=(2, 1), title="t", alternate=False, size=(50, 200))
    result = SessionResult(summary="s", status="running", output="o", cwd="/", wall_time_ms=1, screen=screen)
    assert SessionResult.from_body(result.to_body()).screen == screen


def test_sequences_pyte_does_not_know_cost_nothing() -> None:
    screen = SessionScreen(ROWS, COLS)
    # vim's modifyOtherKeys (a private SGR), a cursor report request, a title push.
    screen.feed("\x1b[?1049h\x1b[>4;2m\x1b[6n\x1b[22;0;0t\x1b[Hstill here")
    shown = screen.take()
    assert shown is not None and shown.rows == ("still here",)


def test_an_emulator_failure_drops_the_model_and_keeps_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = SessionScreen(ROWS, COLS)
    screen.feed("\x1b[?1049hdrawn")

    def broken(*_args: object, **_kwargs: object) -> None:
        raise TypeError("a sequence pyte cannot take")

    monkeypatch.setattr(pyte.Screen, "draw", broken)
    screen.feed("more")
    assert not screen.active and screen.take() is None
    monkeypatch.undo()
    screen.feed("\x1b[?1049h\x1b[Hagain")  # the next draw starts afresh
    shown = screen.take()
    assert shown is not None and shown.rows == ("again",)


def test_a_main_screen_drawn_in_the_read_that_left_the_alternate_one_is_shown() -> None:
    # dialog enters and leaves the alternate screen at once, then draws on the main one;
    # how the PTY cuts that into reads must not matter.
    for cut in (None, 30):
        screen = SessionScreen(ROWS, COLS)
        raw = "\x1b[?1049h\x1b[H\x1b[2J\x1b[?1049l\x1b[H\x1b[2J\x1b[10;5H\x1b(0lqk\x1b(B box"
        for piece in (raw,) if cut is None else (raw[:cut], raw[cut:]):
            screen.feed(piece)
        shown = screen.take()
        assert shown is not None and not shown.alternate
        assert shown.rows == (*[""] * 9, "    ┌─┐ box"), cut


def test_rows_are_what_pyte_displays_wide_characters_included() -> None:
    screen = SessionScreen(ROWS, COLS)
    screen.feed("\x1b[?1049h\x1b[2;3H日本語 wide\x1b[4;198Hend of row\x1b[1;1Hé\u0301 combined  ")
    shown = screen.take()
    assert shown is not None
    model = screen._screen  # the reference: pyte's own rendering of the same cells
    assert model is not None
    expected = [row.rstrip() for row in model.display]
    while expected and not expected[-1]:
        expected.pop()
    assert list(shown.rows) == expected
    assert shown.rows[1] == "  日本語 wide" and shown.rows[3].endswith(" end") and shown.rows[4] == " of row"


def test_a_title_is_cut_to_its_first_200_characters() -> None:
    screen = SessionScreen(ROWS, COLS)
    screen.feed("\x1b[?1049h\x1b]2;" + "t" * 5000 + "\x07")
    shown = screen.take()
    assert shown is not None and shown.title == "t" * 200


def test_a_title_never_terminated_drops_the_emulator() -> None:
    """pyte's parser holds an open title until its terminator: one that never comes must not
    grow without bound (the model starts afresh at the next draw)."""
    screen = SessionScreen(50, 200)
    screen.feed("\x1b[?1049h\x1b]0;a title\x07")
    assert screen.active
    screen.feed("\x1b]2;" + "x" * 3000)
    assert screen.active  # open, but short
    screen.feed("y" * 2000)
    assert not screen.active
    screen.feed("\x1b[?1049h\x1b[Hdrawn")
    assert screen.active and screen.take() is not None
