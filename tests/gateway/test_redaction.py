"""The redactor: whole values, output streams split anywhere, results across calls, files
that rotate, and log lines (docs/security.md#redaction)."""

from __future__ import annotations

import logging
import random
from pathlib import Path

from zodex_gateway.history import FileChange
from zodex_gateway.redaction import (
    MIN_FRAGMENT,
    REDACTED,
    RedactingFormatter,
    SecretRegistry,
    SessionResults,
)

TOKEN = "3f9a" * 16  # 64 characters, like the MCP token
BEARER = "b7c1" * 16


def registry(*secrets: str) -> SecretRegistry:
    found = SecretRegistry()
    for secret in secrets:
        found.add(secret)
    return found


def test_whole_values_and_nested_structures() -> None:
    secrets = registry(TOKEN, BEARER)
    assert secrets.redact(f"a {TOKEN} b {BEARER}{TOKEN}") == f"a {REDACTED} b {REDACTED}{REDACTED}"
    value = {"cmd": f"echo {TOKEN}", TOKEN: [BEARER, 3, None, ("x", TOKEN)]}
    assert secrets.redact_value(value) == {
        "cmd": f"echo {REDACTED}",
        REDACTED: [REDACTED, 3, None, ("x", REDACTED)],
    }
    change = FileChange("add", f"notes/{TOKEN}.txt", None, 1, 0, (f"+{TOKEN}",))
    assert secrets.redact_value(change) == FileChange(
        "add", f"notes/{REDACTED}.txt", None, 1, 0, (f"+{REDACTED}",)
    )


def test_short_values_are_never_secrets() -> None:
    secrets = registry("abc", "")
    assert secrets.secrets() == ()
    assert secrets.redact("abc") == "abc"


def test_a_stream_split_at_every_point_never_shows_the_secret() -> None:
    secrets = registry(TOKEN, BEARER)
    text = f"before {TOKEN} middle {BEARER}{TOKEN[:30]} after"
    expected = f"before {REDACTED} middle {REDACTED}{TOKEN[:30]} after"
    rng = random.Random(7)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 12)))
        stream = secrets.output_stream()
        shown = []
        for low, high in zip([0, *cuts], [*cuts, len(text)], strict=True):
            shown.append(stream.feed(text[low:high]))
        shown.append(stream.finish())
        assert "".join(shown) == expected


def test_a_stream_holds_back_only_a_possible_start_of_a_secret() -> None:
    stream = registry(TOKEN).output_stream()
    assert stream.feed("Password: ") == "Password: ", "a prompt is never delayed"
    assert stream.feed("done 3f9") == "done ", "the start of the token waits"
    assert stream.feed("x") == "3f9x", "and is let go when it turns out to be something else"
    assert stream.feed(TOKEN[:40]) == ""
    assert stream.feed(TOKEN[40:] + "\n") == f"{REDACTED}\n"
    assert stream.feed("ends with 3f") == "ends with "
    assert stream.finish() == "3f", "a short piece is shown when the stream ends"
    assert stream.feed(TOKEN[:MIN_FRAGMENT]) == ""
    assert stream.finish() == REDACTED, "a long piece of a secret at the end is masked"


def test_results_of_one_session_mask_a_secret_split_between_them() -> None:
    results = SessionResults(registry(TOKEN))
    handle = "abcdefg1-xyz"
    first = results.redact(
        handle, {"status": "running", "output": f"key={TOKEN[:20]}", "session_handle": handle}
    )
    assert first["output"] == f"key={REDACTED}" and first["session_handle"] == handle
    middle = results.redact(handle, {"status": "running", "output": TOKEN[20:40]})
    assert middle["output"] == REDACTED
    last = results.redact(handle, {"status": "exited", "output": f"{TOKEN[40:]}\nbye\n"})
    assert last["output"] == f"{REDACTED}\nbye\n"
    # A short piece at a result's end is shown; the rest is masked in the next one.
    short = results.redact("other", {"status": "running", "output": f"x {TOKEN[:5]}"})
    assert short["output"] == f"x {TOKEN[:5]}"
    rest = results.redact("other", {"status": "exited", "output": f"{TOKEN[5:]} y"})
    assert rest["output"] == f"{REDACTED} y"
    # Results without output (apply_patch text, errors) are whole values.
    assert results.redact(None, f"Success. {TOKEN}") == f"Success. {REDACTED}"


def test_a_watched_file_follows_rotation_and_keeps_the_old_value(tmp_path: Path) -> None:
    bearer_file = tmp_path / "observer-bearer"
    secrets = SecretRegistry()
    secrets.watch_file(bearer_file)
    assert secrets.secrets() == (), "no file yet: nothing to redact"
    bearer_file.write_text(BEARER + "\n")
    assert secrets.redact(BEARER) == REDACTED
    rotated = "9e0d" * 16
    replacement = tmp_path / ".observer-bearer.1"
    replacement.write_text(rotated + "\n")
    replacement.replace(bearer_file)
    assert secrets.redact(f"{BEARER} {rotated}") == f"{REDACTED} {REDACTED}"


def test_log_lines_and_tracebacks_are_redacted() -> None:
    formatter = RedactingFormatter("%(levelname)s %(message)s", registry(TOKEN))
    try:
        raise ValueError(f"bad {TOKEN}")
    except ValueError:
        import sys

        record = logging.LogRecord("zodex", logging.ERROR, __file__, 1, "saw %s", (TOKEN,), sys.exc_info())
    line = formatter.format(record)
    assert TOKEN not in line and line.startswith(f"ERROR saw {REDACTED}") and f"bad {REDACTED}" in line


def test_a_stored_screen_is_redacted_row_by_row() -> None:
    # docs/output.md#screens: the screen is stored with the result, as the model got it.
    results = SessionResults(registry(TOKEN))
    screen = {
        "rows": [f"token: {TOKEN}", "~"],
        "cursor": [0, 7],
        "title": TOKEN,
        "alternate": True,
        "size": [50, 200],
    }
    stored = results.redact("abcdefg1-xyz", {"status": "running", "output": "[zodex] …", "screen": screen})
    assert stored["screen"] == {**screen, "rows": [f"token: {REDACTED}", "~"], "title": REDACTED}
    assert TOKEN not in repr(stored)
