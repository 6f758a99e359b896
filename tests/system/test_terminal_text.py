"""TerminalCleaner: escape removal, control characters, CR/LF and the partial-line model."""

from __future__ import annotations

import pytest

from zodex_system.terminal_text import TerminalCleaner


def clean(*chunks: str, **kwargs: int) -> str:
    cleaner = TerminalCleaner(**kwargs)
    return "".join(cleaner.feed(chunk) for chunk in chunks) + cleaner.finish()


ESCAPES = [
    pytest.param("\x1b[1;31mred\x1b[0m plain\n", "red plain\n", id="csi-sgr"),
    pytest.param("\x1b[38;2;255;0;0mtrue\x1b[m\n", "true\n", id="csi-truecolor"),
    pytest.param("\x1b[?25lhidden\x1b[?25h\n", "hidden\n", id="csi-private-mode"),
    pytest.param("\x1b[?2004h\x1b[2K\x1b[1G\x1b[3Ax\n", "x\n", id="csi-erase-move"),
    pytest.param("\x1b[0 qcursor\n", "cursor\n", id="csi-intermediate"),
    pytest.param("\x1b[>4;1mkey\n", "key\n", id="csi-private-prefix"),
    pytest.param("\x9b31mc1\x9b0m\n", "c1\n", id="csi-8bit"),
    pytest.param("\x1b]0;my title\x07after\n", "after\n", id="osc-bel"),
    pytest.param("\x1b]2;my title\x1b\\after\n", "after\n", id="osc-st"),
    pytest.param("\x1b]8;;https://e.org/\x1b\\link\x1b]8;;\x1b\\\n", "link\n", id="osc-hyperlink"),
    pytest.param("\x9d0;title\x9cx\n", "x\n", id="osc-8bit"),
    pytest.param("\x1b]0;tit\x18le\n", "le\n", id="osc-cancelled-by-can"),
    pytest.param("\x1b]0;title\x1b[31mx\n", "x\n", id="osc-aborted-by-esc"),
    pytest.param("\x1b(Bascii\x1b)0g1\x1b*Ag2\x1b+Bg3\n", "asciig1g2g3\n", id="charset-designation"),
    pytest.param("\x1b%Gutf8\x1b%@\n", "utf8\n", id="charset-utf8-switch"),
    pytest.param("\x1b#8align\n", "align\n", id="esc-hash"),
    pytest.param("\x1bP1$r0m\x1b\\dcs\n", "dcs\n", id="dcs"),
    pytest.param("\x1bPbell\x07inside\x1b\\x\n", "x\n", id="dcs-bel-is-body"),
    pytest.param("\x1bXsos\x1b\\\x1b^pm\x1b\\\x1b_apc\x1b\\x\n", "x\n", id="sos-pm-apc"),
    pytest.param("\x90data\x9cx\n", "x\n", id="dcs-8bit"),
    pytest.param("\x1b=\x1b>\x1b7\x1b8\x1bM\x1bD\x1bE\x1bc\x1bN\x1bOx\n", "x\n", id="two-char"),
    pytest.param("\x1b[12\x07x\n", "x\n", id="csi-aborted-by-control"),
    pytest.param("\x1b[1\x1b[2mx\n", "x\n", id="csi-aborted-by-esc"),
    pytest.param("\x1b[1ébc\n", "ébc\n", id="csi-aborted-by-text"),
    pytest.param("\x1b\x1b[31mx\x1bé\x1b\x7fy\x1b\nz\n", "xéy\nz\n", id="lone-esc"),
]


@pytest.mark.parametrize(("raw", "expected"), ESCAPES)
def test_escape_families_are_removed(raw: str, expected: str) -> None:
    assert clean(raw) == expected


@pytest.mark.parametrize(("raw", "expected"), ESCAPES)
def test_escapes_split_at_every_position(raw: str, expected: str) -> None:
    for i in range(len(raw) + 1):
        assert clean(raw[:i], raw[i:]) == expected, i
        for j in range(i, len(raw) + 1):
            assert clean(raw[:i], raw[i:j], raw[j:]) == expected, (i, j)
    assert clean(*raw) == expected


def test_incomplete_sequence_at_end_of_stream_is_dropped() -> None:
    assert clean("ab\x1b[3") == "ab"
    assert clean("ab\x1b]0;title") == "ab"
    assert clean("ab\x1b") == "ab"


def test_feed_returns_only_complete_lines() -> None:
    cleaner = TerminalCleaner()
    assert cleaner.feed("one\ntw") == "one\n"
    assert cleaner.has_partial()
    assert cleaner.feed("o\nthr") == "two\n"
    assert cleaner.finish() == "thr"
    assert not cleaner.has_partial()


class TestSequenceBounds:
    def test_unterminated_osc_is_dropped_and_parsing_resumes(self) -> None:
        raw = "\x1b]" + "a" * 5000 + "\nrest\n"
        assert clean(raw) == "a" * (5000 - 4096) + "\nrest\n"

    def test_overlong_csi_is_dropped_and_parsing_resumes(self) -> None:
        assert clean("\x1b[" + "1" * 4100 + "mX\n") == "1111mX\n"

    def test_bound_gives_the_same_result_for_any_chunking(self) -> None:
        raw = "x\x1b]" + "b" * 40 + "\x1b[" + "2" * 30 + "m\x1bP" + "c" * 20 + "\x1b\\end\n"
        whole = clean(raw, max_sequence_chars=16)
        assert whole.startswith("x") and whole.endswith("end\n")
        for size in range(1, 20):
            pieces = [raw[i : i + size] for i in range(0, len(raw), size)]
            assert clean(*pieces, max_sequence_chars=16) == whole, size

    def test_unterminated_sequence_holds_bounded_memory(self) -> None:
        cleaner = TerminalCleaner()
        cleaner.feed("\x1b]0;")
        for _ in range(1000):
            cleaner.feed("z" * 100)
            # The sequence itself never holds more than its bound; past it the text is
            # ordinary text again, held at most as one pending line.
            assert cleaner.held_chars <= 4096 + 16384


class TestCarriageReturn:
    def test_crlf_becomes_lf(self) -> None:
        assert clean("a\r\nb\r\n") == "a\nb\n"

    def test_crlf_split_across_chunks(self) -> None:
        assert clean("a\r", "\nb\r", "\n") == "a\nb\n"
        cleaner = TerminalCleaner()
        assert cleaner.feed("line\r") == ""
        assert cleaner.feed("\n") == "line\n"

    def test_progress_bar_leaves_its_last_state(self) -> None:
        assert clean("10%\r20%\r", "30%\r100%\ndone\n") == "100%\ndone\n"

    def test_rewind_discards_the_whole_line(self) -> None:
        assert clean("abcdef\rXY\n") == "XY\n"

    def test_doubled_cr_before_lf_keeps_the_line(self) -> None:
        # A PTY with ONLCR turns a program's own "\r\n" into "\r\r\n".
        assert clean("text\r\r\n") == "text\n"

    def test_control_between_cr_and_lf_keeps_the_line(self) -> None:
        assert clean("text\r\x1b[K\n") == "text\n"

    def test_trailing_cr_at_end_of_stream_keeps_last_state(self) -> None:
        assert clean("50%\r100%\r") == "100%"

    def test_cr_then_tab_rewinds(self) -> None:
        assert clean("old\r\tnew\n") == "\tnew\n"


class TestPartialFlush:
    def test_prompt_reaches_the_caller(self) -> None:
        cleaner = TerminalCleaner()
        assert cleaner.feed("\x1b[1mPassword: \x1b[0m") == ""
        assert cleaner.flush_partial() == "Password: "
        assert cleaner.flush_partial() == ""
        assert cleaner.feed("\r\n") == "\n"

    def test_line_continues_after_flush(self) -> None:
        cleaner = TerminalCleaner()
        cleaner.feed("Name: ")
        assert cleaner.flush_partial() == "Name: "
        assert cleaner.feed("zed\n") == "zed\n"

    def test_rewind_after_flush_starts_a_new_line(self) -> None:
        cleaner = TerminalCleaner()
        cleaner.feed(" 10%")
        assert cleaner.flush_partial() == " 10%"
        # The line break is committed as soon as new text overwrites the flushed line.
        assert cleaner.feed("\r 20%\r 30%") == "\n"
        assert cleaner.flush_partial() == " 30%"
        assert cleaner.feed("\r100%\n") == "\n100%\n"

    def test_flush_of_a_line_awaiting_rewind(self) -> None:
        cleaner = TerminalCleaner()
        cleaner.feed("50%\r")
        assert cleaner.flush_partial() == "50%"
        assert cleaner.feed("60%\n") == "\n60%\n"
        assert cleaner.finish() == ""

    def test_rewind_after_flush_then_newline_adds_no_blank_line(self) -> None:
        cleaner = TerminalCleaner()
        cleaner.feed("abc")
        cleaner.flush_partial()
        assert cleaner.feed("\r\n") == "\n"
        assert cleaner.feed("next\n") == "next\n"

    def test_finish_after_flush(self) -> None:
        cleaner = TerminalCleaner()
        cleaner.feed("abc")
        assert cleaner.flush_partial() == "abc"
        assert cleaner.finish() == ""


class TestLongLines:
    def test_long_line_is_committed_in_pieces(self) -> None:
        cleaner = TerminalCleaner(max_line_chars=10)
        assert cleaner.feed("a" * 25) == "a" * 20
        assert cleaner.held_chars == 5
        # Those pieces were given out, so a rewind starts a new line.
        assert cleaner.feed("\rX\n") == "\nX\n"

    def test_long_line_with_newline_is_unchanged(self) -> None:
        assert clean("a" * 25 + "\n" + "b" * 9, max_line_chars=10) == "a" * 25 + "\n" + "b" * 9


class TestInsertLine:
    def test_after_partial_line(self) -> None:
        cleaner = TerminalCleaner()
        cleaner.feed("partial")
        assert cleaner.insert_line("[zodex] note") == "partial\n[zodex] note\n"

    def test_at_line_start(self) -> None:
        cleaner = TerminalCleaner()
        assert cleaner.feed("done\n") == "done\n"
        assert cleaner.insert_line("[zodex] note\n") == "[zodex] note\n"

    def test_after_flushed_partial(self) -> None:
        cleaner = TerminalCleaner()
        cleaner.feed("abc")
        cleaner.flush_partial()
        assert cleaner.insert_line("[zodex] note") == "\n[zodex] note\n"
        # The notice ended the line: no break is added before the next text.
        assert cleaner.feed("\rnext\n") == "next\n"

    def test_cut_escape_sequence_survives_a_notice(self) -> None:
        cleaner = TerminalCleaner()
        assert cleaner.feed("a\x1b[") == ""
        assert cleaner.insert_line("n") == "a\nn\n"
        assert cleaner.feed("31mb\n") == "b\n"


class TestCharacters:
    def test_tab_and_newline_kept(self) -> None:
        assert clean("a\tb\n\tc\n") == "a\tb\n\tc\n"

    @pytest.mark.parametrize(
        "code",
        [
            c
            for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]
            if chr(c) not in "\t\n\r\x1b\x9b\x9d\x90\x98\x9e\x9f"
        ],
    )
    def test_other_controls_dropped(self, code: int) -> None:
        assert clean(f"a{chr(code)}b{chr(code) * 3}c\n") == "abc\n"

    @pytest.mark.parametrize("code", [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
    def test_bidi_controls_dropped(self, code: int) -> None:
        assert clean(f"a{chr(code)}b\n") == "ab\n"

    def test_printable_unicode_and_replacement_char_kept(self) -> None:
        text = "é 中文 😀 \ufffd \u200b \xa0 \u2028 x\n"
        assert clean(text) == text
