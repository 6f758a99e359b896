"""Cleaned views are redacted after cleaning (docs/security.md#redaction): a secret whose
halves an escape, a control or a bidi character kept apart in the raw text is caught in the
cleaned text, whole or live, wherever the live stream is cut."""

from __future__ import annotations

from zodex_gateway.observer.display import DisplayStream, shown_text
from zodex_gateway.redaction import REDACTED, SecretRegistry

TOKEN = "3f9a" * 16


def registry() -> SecretRegistry:
    found = SecretRegistry()
    found.add(TOKEN)
    return found


def test_the_whole_cleaned_text_is_redacted_and_a_running_ones_possible_secret_start_waits() -> None:
    raw = f"ok\n{TOKEN[:20]}\x1b[1m\x01\u202e{TOKEN[20:]}\nnext\n"
    assert TOKEN not in raw
    assert shown_text(raw, ended=True, secrets=registry()) == f"ok\n{REDACTED}\nnext\n"
    # Still running, the cleaned text ends with the start of the token: not shown yet.
    running = f"ok\n{TOKEN[:30]}"
    assert shown_text(running, ended=False, secrets=registry()) == "ok\n"
    assert shown_text(running, ended=True, secrets=registry()) == f"ok\n{REDACTED}"


def test_live_display_text_is_redacted_wherever_the_events_are_cut() -> None:
    raw = f"a\n{TOKEN[:10]}\x1b[0m{TOKEN[10:40]}\x1b]0;title\x07{TOKEN[40:]}\nb\n"
    for cut in range(1, len(raw)):
        stream = DisplayStream(registry())
        shown = stream.feed(raw[:cut]) + stream.feed(raw[cut:]) + stream.finish()
        assert shown == f"a\n{REDACTED}\nb\n", cut
    # A line longer than the cleaner's line bound is committed in pieces: the cut between
    # two pieces falls inside the token, and the held-back start joins the next piece.
    long = "x" * (16384 - 5) + TOKEN + "\n"
    stream = DisplayStream(registry())
    shown = "".join(stream.feed(long[i : i + 1000]) for i in range(0, len(long), 1000)) + stream.finish()
    assert TOKEN not in shown and shown == "x" * (16384 - 5) + f"{REDACTED}\n"
