"""Watching a session's output for a pattern (docs/tools.md#waiting-for-output): split reads,
the pending line, what counts as new, the overlap's bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from zodex_protocol.wait_pattern import WaitPattern
from zodex_worker.output.stream import SessionOutput
from zodex_worker.output.watch import OVERLAP_BYTES, UNCHECKED_CHARS, OutputWatch


def watch(source: str, context: str = "") -> OutputWatch:
    return OutputWatch(WaitPattern.compile(source), context)


@pytest.fixture
def out(tmp_path: Path) -> Iterator[SessionOutput]:
    session = SessionOutput(spill_dir=tmp_path, spill_name="w")
    yield session
    session.close()


def test_a_match_split_between_checks_is_found() -> None:
    w = watch("files\nDone")
    w.add("Compiling 3 files\n")
    assert not w.check()
    w.add("Done\n")
    assert w.check() and w.matched == "files\nDone"


def test_the_pending_line_is_matched_as_it_stands() -> None:
    w = watch(r"name\? $")
    assert not w.check("na")
    assert w.check("name? ") and w.matched == "name? "


def test_no_match_starts_in_the_context() -> None:
    w = watch("^foo", context="x")
    w.add("foo\n")
    assert not w.check()
    w = watch("^foo", context="\n")
    w.add("foo\n")
    assert w.check()
    w = watch("ab", context="a")
    w.add("b")
    assert not w.check()


def test_matches_up_to_the_overlap_are_found_longer_ones_are_not() -> None:
    inside = watch("<.*>")
    inside.add("<" + "x" * (OVERLAP_BYTES - 10))
    assert not inside.check()
    inside.add("x>")
    assert inside.check() and inside.matched is not None and len(inside.matched) == 200
    beyond = watch("<.*>")
    beyond.add("<" + "x" * (OVERLAP_BYTES + 10))
    assert not beyond.check()
    beyond.add("x>")
    assert not beyond.check()


def test_the_overlap_never_splits_a_character() -> None:
    w = watch("éZ")
    w.add("é" * (OVERLAP_BYTES + 1))  # odd: a cut at a byte count would split one
    assert not w.check()
    w.add("Z")
    assert w.check() and w.matched == "éZ"


def test_output_not_yet_delivered_counts_as_new(out: SessionOutput) -> None:
    out.feed(b"first\n")
    assert out.take_delta() == "first\n"
    out.feed(b"Listening on 80")
    out.watch(WaitPattern.compile("first"))
    assert not out.check_watch()
    out.unwatch()
    out.watch(WaitPattern.compile("Listening on [0-9]+"))
    assert out.check_watch()
    watch = out.unwatch()
    assert watch is not None and watch.matched == "Listening on 80"


def test_after_typing_the_prompt_typed_at_is_not_new(out: SessionOutput) -> None:
    out.feed(b"name? ")
    out.watch(WaitPattern.compile(r"name\? "), after_typing=True)
    assert not out.check_watch()
    out.feed(b"bob\r\nname? ")
    assert out.check_watch()
    assert out.take_delta() == "name? bob\nname? "


def test_the_head_of_an_undelivered_preview_is_searched_too(out: SessionOutput) -> None:
    out.feed(b"error: the cause\n" + b"noise\n" * 5000)
    out.watch(WaitPattern.compile("error: .*"))
    assert out.check_watch()
    watch = out.unwatch()
    assert watch is not None and watch.matched == "error: the cause"


def test_a_flood_is_matched_as_it_commits(out: SessionOutput) -> None:
    out.watch(WaitPattern.compile("^ready$"))
    chunk = b"".join(b"%07d\n" % i for i in range(8192))
    for _ in range(40):  # 2.6 MB, beyond the inline limit and the preview's bounds
        out.feed(chunk)
        assert not out.check_watch()
    out.feed(b"rea")
    assert not out.check_watch()
    out.feed(b"dy\n")
    assert out.check_watch()


def test_text_added_without_checks_does_not_pile_up() -> None:
    w = watch("needle")
    line = "x" * 1023 + "\n"
    for _ in range(3 * UNCHECKED_CHARS // len(line)):
        w.add(line)
    assert w._new_chars <= UNCHECKED_CHARS and len(w._window) <= OVERLAP_BYTES + 1
    w.add("a needle\n")
    for _ in range(2 * UNCHECKED_CHARS // len(line)):
        w.add(line)  # searched on the way: the match is kept, the rest not held
    assert w._new_chars == 0 and w.matched == "needle" and w.check()
