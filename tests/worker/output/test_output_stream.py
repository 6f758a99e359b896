"""SessionOutput: decoding, deltas, head and tail previews, spill files, counts and bounded memory."""

from __future__ import annotations

import stat
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zodex_worker.output.stream import SessionOutput

MiB = 1024 * 1024


def spill_fields(out: SessionOutput) -> dict[str, Any] | None:
    """The spill fields of a result, as the wire carries them."""
    spilled = out.spilled()
    return None if spilled is None else spilled.fields()


@pytest.fixture
def spill_dir(tmp_path: Path) -> Path:
    return tmp_path / "state" / "spill"


@pytest.fixture
def out(spill_dir: Path) -> Iterator[SessionOutput]:
    session = SessionOutput(spill_dir=spill_dir, spill_name="h1")
    yield session
    session.close()


def numbered_lines(start: int, count: int) -> str:
    return "".join(f"line {i}\n" for i in range(start, start + count))


def marker(lines: int, size: str, where: str) -> str:
    """A preview's marker line (docs/output.md#deltas-and-previews)."""
    return f"[zodex] … {lines:,} {'line' if lines == 1 else 'lines'}, {size} omitted; {where}\n"


def last_whole_lines(text: str, chars: int) -> str:
    """The last ``chars`` of ``text`` from the first line start among them."""
    tail = text[len(text) - chars :]
    return tail if text[len(text) - chars - 1] == "\n" else tail.split("\n", 1)[1]


def marker_line(delta: str) -> str:
    return next(line for line in delta.splitlines() if line.startswith("[zodex] … "))


class TestDecoding:
    def test_feed_returns_raw_text_with_escapes(self, out: SessionOutput) -> None:
        assert out.feed(b"\x1b[31mred\x1b[0m\r\n") == "\x1b[31mred\x1b[0m\r\n"
        assert out.take_delta() == "red\n"

    @pytest.mark.parametrize("split", range(1, 4))
    def test_multibyte_char_split_across_feeds(self, out: SessionOutput, split: int) -> None:
        emoji = "😀".encode()
        assert out.feed(b"a" + emoji[:split]) == "a"
        assert out.feed(emoji[split:] + b"b") == "😀b"
        assert out.take_delta() == "a😀b"

    def test_multibyte_char_fed_byte_by_byte(self, out: SessionOutput) -> None:
        raw = "".join(out.feed(bytes([b])) for b in "😀é中".encode())
        assert raw == "😀é中"
        assert out.take_delta() == "😀é中"

    def test_invalid_bytes_become_replacement_chars(self, out: SessionOutput) -> None:
        assert out.feed(b"a\xffb\xc3(\n") == "a\ufffdb\ufffd(\n"
        assert out.take_delta() == "a\ufffdb\ufffd(\n"

    def test_cut_char_at_end_of_stream(self, out: SessionOutput) -> None:
        assert out.feed(b"x\xf0\x9f") == "x"
        assert out.finish() == "\ufffd"
        assert out.take_delta() == "x\ufffd"


class TestDeltas:
    def test_deltas_never_repeat(self, out: SessionOutput) -> None:
        out.feed(b"one\ntw")
        assert out.take_delta() == "one\ntw"
        assert out.take_delta() == ""
        out.feed(b"o\nthree\n")
        assert out.take_delta() == "o\nthree\n"
        assert out.take_delta() == ""

    def test_has_undelivered_counts_the_partial_line(self, out: SessionOutput) -> None:
        assert not out.has_undelivered()
        out.feed(b"\x1b[?25l")
        assert not out.has_undelivered()
        out.feed(b"Password: ")
        assert out.has_undelivered()
        assert out.take_delta() == "Password: "
        assert not out.has_undelivered()
        out.feed(b"\r\n")
        assert out.has_undelivered()
        assert out.take_delta() == "\n"

    def test_progress_after_delivered_partial_goes_on_new_lines(self, out: SessionOutput) -> None:
        out.feed(b" 10%")
        assert out.take_delta() == " 10%"
        out.feed(b"\r 20%\r 30%")
        assert out.take_delta() == "\n 30%"
        out.feed(b"\r100%\r\n")
        out.finish()
        assert out.take_delta() == "\n100%\n"

    def test_add_notice_on_its_own_line(self, out: SessionOutput) -> None:
        out.feed(b"working...")
        out.add_notice("[zodex] command timed out after 30.0s and was terminated")
        assert out.take_delta() == "working...\n[zodex] command timed out after 30.0s and was terminated\n"
        out.feed(b"done\n")
        out.add_notice("[zodex] second")
        assert out.take_delta() == "done\n[zodex] second\n"

    def test_finish_commits_the_last_partial_line(self, out: SessionOutput) -> None:
        out.feed(b"no newline at end\x1b[0")
        assert out.finish() == ""
        assert out.take_delta() == "no newline at end"


class TestPreview:
    def test_delta_at_the_limit_is_inline(self, out: SessionOutput) -> None:
        text = "x" * 15999 + "\n"
        out.feed(text.encode())
        assert out.take_delta() == text
        assert spill_fields(out) is None

    def test_long_delta_keeps_whole_first_and_last_lines(self, out: SessionOutput, spill_dir: Path) -> None:
        text = numbered_lines(0, 3000)
        for i in range(0, len(text), 1000):
            out.feed(text[i : i + 1000].encode())
        delta = out.take_delta()
        # The most whole lines within a quarter of the 4000 characters, and within the rest.
        head = text[: text[:1000].rfind("\n") + 1]
        tail = last_whole_lines(text, 3000)
        assert len(head) > 900 and len(tail) > 2900 and tail.startswith("line ")
        lines = 3000 - head.count("\n") - tail.count("\n")
        size = f"{(len(text) - len(head) - len(tail)) / 1000:.1f} kB"
        where = f"the whole output is in {spill_dir / 'h1.log'}"
        assert delta == head + marker(lines, size, where) + tail
        assert out.take_delta() == ""

    def test_a_first_line_over_the_head_budget_is_cut(self, out: SessionOutput, spill_dir: Path) -> None:
        rest = numbered_lines(0, 2000)
        out.feed(("E" * 5000 + "\n" + rest).encode())
        delta = out.take_delta()
        # No line end in the head's budget: cut where the budget ends, the marker on a line of its own.
        head, line, tail = delta.split("\n", 2)
        assert head == "E" * 1000
        assert tail == last_whole_lines(rest, 3000)
        size = f"{(5001 + len(rest) - 1000 - len(tail)) / 1000:.1f} kB"
        lines = 1 + 2000 - tail.count("\n")  # the long line's end, and the lines not shown
        assert line + "\n" == marker(lines, size, f"the whole output is in {spill_dir / 'h1.log'}")

    def test_a_last_line_over_the_tail_budget_is_cut(self, out: SessionOutput) -> None:
        text = numbered_lines(0, 2000) + "T" * 5000  # the last line has no end yet
        out.feed(text.encode())
        delta = out.take_delta()
        head = text[: text[:1000].rfind("\n") + 1]
        assert delta.startswith(head + "[zodex] … ")
        assert delta.endswith("\n" + "T" * 3000) and not delta.endswith("T" * 3001)
        assert marker_line(delta).startswith(f"[zodex] … {2000 - head.count(chr(10)):,} lines, ")

    def test_later_small_deltas_are_inline_again(self, out: SessionOutput) -> None:
        out.feed(("y" * 20000 + "\n").encode())
        assert out.take_delta().startswith("y" * 1000 + "\n[zodex] … 0 lines, 16.0 kB omitted;")
        out.feed(b"small\n")
        assert out.take_delta() == "small\n"

    def test_preview_counts_the_partial_line(self, out: SessionOutput) -> None:
        out.feed(("z" * 17000).encode())
        delta = out.take_delta()
        assert delta.startswith("z" * 1000 + "\n[zodex] … 0 lines, 13.0 kB omitted;")
        assert delta.endswith("\n" + "z" * 3000)

    def test_omitted_size_counts_utf8_bytes(self, out: SessionOutput) -> None:
        out.feed(("é" * 17000).encode())  # two bytes each
        assert "[zodex] … 0 lines, 26.0 kB omitted;" in out.take_delta()

    def test_custom_limits(self, spill_dir: Path) -> None:
        session = SessionOutput(spill_dir=spill_dir, spill_name="c", inline_limit=10, preview_chars=3)
        session.feed(b"0123456789A\n")  # a quarter of 3 is no head at all
        where = f"the whole output is in {spill_dir / 'c.log'}"
        assert session.take_delta() == marker(0, "9 bytes", where) + "9A\n"
        session.close()

    @pytest.mark.parametrize(
        ("head", "starts", "ends"),
        [(0, "[zodex] … ", "\n" + "line 1999\n"), (4000, "line 0\n", "[zodex] … ")],
    )
    def test_the_head_share_can_be_all_or_nothing(
        self, spill_dir: Path, head: int, starts: str, ends: str
    ) -> None:
        session = SessionOutput(spill_dir=spill_dir, spill_name="s", preview_head_chars=head)
        session.feed(numbered_lines(0, 2000).encode())
        delta = session.take_delta()
        session.close()
        assert delta.startswith(starts)
        assert delta.endswith(ends) or delta.splitlines()[-1].startswith(ends.strip())

    def test_invalid_limits_rejected(self, spill_dir: Path) -> None:
        with pytest.raises(ValueError):
            SessionOutput(spill_dir=spill_dir, spill_name="c", inline_limit=100, preview_chars=101)

    @pytest.mark.parametrize("name", ["", ".", "..", "../escape", "a/b", "a\\b"])
    def test_spill_name_must_be_a_plain_name(self, spill_dir: Path, name: str) -> None:
        with pytest.raises(ValueError):
            SessionOutput(spill_dir=spill_dir, spill_name=name)


class TestSpill:
    def test_spill_file_holds_the_whole_stream_from_the_first_char(
        self, out: SessionOutput, spill_dir: Path
    ) -> None:
        first = numbered_lines(0, 100)
        out.feed(b"\x1b[1m" + first.encode())
        assert out.take_delta() == first
        assert spill_fields(out) is None
        assert not spill_dir.exists()

        rest = numbered_lines(100, 3000)
        out.feed(rest.replace("\n", "\r\n").encode())
        fields = spill_fields(out)
        assert fields is not None
        path = Path(str(fields["output_file"]))
        assert path == spill_dir / "h1.log" and path.is_absolute()
        assert path.read_text() == first + rest  # readable while the session runs
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(spill_dir.stat().st_mode) == 0o700

        out.feed(b"tail without newline")
        out.take_delta()
        out.feed(b" continued\n")
        out.add_notice("[zodex] note")
        whole = first + rest + "tail without newline continued\n[zodex] note\n"
        assert path.read_text() == whole
        assert spill_fields(out) == {
            "output_file": str(path),
            "output_chars": len(whole),
            "output_lines": whole.count("\n"),
            "output_file_truncated": False,
        }

    def test_line_count_includes_an_unterminated_last_line(self, out: SessionOutput) -> None:
        out.feed(("a\n" * 9000 + "last").encode())
        out.take_delta()
        fields = spill_fields(out)
        assert fields is not None
        assert fields["output_lines"] == 9001
        assert fields["output_chars"] == 18004

    def test_small_cap_truncates_file_but_not_counts(self, spill_dir: Path) -> None:
        session = SessionOutput(spill_dir=spill_dir, spill_name="cap", file_cap_bytes=1000)
        text = "é" * 30000 + "\n"  # two bytes per char: a cut at an odd byte would split one
        session.feed(text.encode())
        delta = session.take_delta()
        session.close()
        fields = spill_fields(session)
        assert fields is not None
        assert fields["output_file_truncated"] is True
        assert fields["output_chars"] == 30001
        assert fields["output_lines"] == 1
        assert (spill_dir / "cap.log").read_bytes() == ("é" * 500).encode()
        assert delta.endswith("\n" + "é" * 2999 + "\n")

    def test_default_cap_is_16_mib(self, spill_dir: Path) -> None:
        session = SessionOutput(spill_dir=spill_dir, spill_name="big")
        chunk = ("0123456789abcde\n" * 4096).encode()  # 64 KiB
        for _ in range(17 * 16):  # 17 MiB
            session.feed(chunk)
        fields = spill_fields(session)
        session.close()
        assert fields is not None
        assert fields["output_file_truncated"] is True
        assert fields["output_chars"] == 17 * MiB
        assert fields["output_lines"] == 17 * MiB // 16
        path = spill_dir / "big.log"
        assert path.stat().st_size == 16 * MiB
        with path.open("rb") as f:
            assert f.read(len(chunk)) == chunk

    def test_unwritable_spill_dir_keeps_working(self, tmp_path: Path) -> None:
        (tmp_path / "file").write_text("")
        session = SessionOutput(spill_dir=tmp_path / "file" / "spill", spill_name="h")
        session.feed(("w" * 20000).encode())
        delta = session.take_delta()
        assert (
            delta
            == "w" * 1000
            + "\n"
            + marker(0, "16.0 kB", "the whole output was not saved (Not a directory)")
            + "w" * 3000
        )
        assert spill_fields(session) == {
            "output_chars": 20000,
            "output_lines": 1,
            "output_file_error": "Not a directory",
        }
        session.feed(b"\nmore\n")
        assert session.take_delta() == "\nmore\n"
        session.close()

    def test_taken_spill_name_is_not_overwritten(self, spill_dir: Path) -> None:
        spill_dir.mkdir(parents=True)
        (spill_dir / "h.log").write_text("someone else's")
        session = SessionOutput(spill_dir=spill_dir, spill_name="h")
        session.feed(("v" * 20000).encode())
        assert "the whole output was not saved" in session.take_delta()
        assert (spill_dir / "h.log").read_text() == "someone else's"
        session.close()

    def test_close_keeps_the_file(self, out: SessionOutput, spill_dir: Path) -> None:
        out.feed(("k" * 20000 + "\n").encode())
        out.close()
        out.close()
        assert (spill_dir / "h1.log").read_text() == "k" * 20000 + "\n"


def test_memory_stays_bounded_under_large_volume(tmp_path: Path) -> None:
    session = SessionOutput(spill_dir=tmp_path, spill_name="flood", file_cap_bytes=MiB)
    chunk = b"".join(b"%07d \x1b[32mok\x1b[0m\r\n" % i for i in range(3120))  # 65520 bytes
    cleaned_per_chunk = 3120 * len("0000000 ok\n")
    # Head and undelivered text (the same strings until the spill), one chunk, the cleaner.
    bound = 2 * 16000 + len(chunk) + 16384 + 4096
    fed = 0
    tracemalloc.start()
    try:
        while fed < 50 * MiB:
            session.feed(chunk)
            fed += len(chunk)
            assert session.held_chars <= bound, fed
            if fed % (64 * len(chunk)) == 0:
                session.take_delta()  # a poll now and then
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    session.close()
    assert peak < 2 * MiB, peak
    fields = spill_fields(session)
    assert fields is not None
    assert fields["output_chars"] == fed // len(chunk) * cleaned_per_chunk
    assert fields["output_file_truncated"] is True
    assert (tmp_path / "flood.log").stat().st_size == MiB  # ASCII: the cap is met exactly


def test_the_notice_of_a_capped_file_says_it_holds_the_first_part(spill_dir: Path) -> None:
    """Past the cap the file is not the full output: the notice must not say it is."""
    session = SessionOutput(spill_dir=spill_dir, spill_name="capped", file_cap_bytes=64 * 1024)
    session.feed(("x" * 99 + "\n").encode() * 2000)  # 200,000 characters, over the 64 KiB cap
    delta = session.take_delta()
    session.close()
    fields = spill_fields(session)
    assert fields is not None and fields["output_file_truncated"] is True
    path = spill_dir / "capped.log"
    assert marker_line(delta) == (
        f"[zodex] … 1,960 lines, 196.0 kB omitted; the first 64 KiB of the output is in {path}"
    )
    assert path.stat().st_size == 64 * 1024
    assert "whole output" not in delta


def test_the_notice_before_the_cap_still_says_full_output(spill_dir: Path) -> None:
    session = SessionOutput(spill_dir=spill_dir, spill_name="uncapped", file_cap_bytes=1000 * 1000)
    session.feed(("x" * 99 + "\n").encode() * 200)
    delta = session.take_delta()
    session.close()
    assert marker_line(delta).endswith(f"; the whole output is in {spill_dir / 'uncapped.log'}")
