"""The one log formatter (docs/security.md#logs): a field from the agent or a client — a
workdir's name, a worker's stderr — never forges a line or reaches a terminal raw."""

from __future__ import annotations

import logging
import sys

import pytest

from zodex_system.log_lines import LogFormatter, escape_controls, escape_field

FORGED = "inj\n2026-12-01 00:00:00,000 zodex.sprite INFO stopped\n\x1b[2J"
# C0 and C1 controls, DEL, carriage return, line/paragraph separators, bidi overrides and
# isolates, a zero-width joiner, a no-break space.
HOSTILE = ["\x00", "\x07", "\t", "\r", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u2029",
           "\u202a", "\u202b", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
           "\u200e", "\u200f", "\u061c", "\u200d", "\u00a0"]  # fmt: skip

FMT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = sys.exc_info() if exc else None
    return logging.LogRecord("zodex.sprite", logging.INFO, __file__, 1, msg, args, info)


@pytest.mark.parametrize("ch", HOSTILE)
def test_every_hostile_character_is_escaped(ch: str) -> None:
    line = LogFormatter(FMT).format(record("worker for %s started", f"/w/a{ch}b"))
    assert ch not in line
    assert line.endswith(f"worker for /w/a{repr(ch)[1:-1]}b started")
    assert "\n" not in line and all(c.isprintable() for c in line)


def test_a_workdir_name_cannot_forge_a_line() -> None:
    line = LogFormatter(FMT).format(record("worker for %s started (pid %d)", FORGED, 42))
    assert line.count("\n") == 0
    assert line.endswith(
        "worker for inj\\n2026-12-01 00:00:00,000 zodex.sprite INFO stopped\\n\\x1b[2J started (pid 42)"
    )


def test_backslashes_of_a_field_are_doubled_so_escapes_read_one_way() -> None:
    assert escape_field("a\\nb") == "a\\\\nb"
    assert escape_field("a\nb") == "a\\nb"
    assert escape_controls("a\\nb") == "a\\nb", "our own text keeps its backslashes"
    line = LogFormatter("%(message)s").format(record("for %s", "a\\nb"))
    assert line == "for a\\\\nb"


def test_mapping_arguments_and_objects_are_escaped_too() -> None:
    assert LogFormatter("%(message)s").format(record("for %(dir)s", {"dir": "x\ry"})) == "for x\\ry"
    error = OSError(f"cannot open {FORGED}")
    line = LogFormatter("%(message)s").format(record("failed: %s", error))
    assert "\n" not in line and "\x1b" not in line and "\\x1b[2J" in line


def test_a_message_built_before_logging_is_escaped() -> None:
    line = LogFormatter("%(message)s").format(record(f"started {FORGED}"))
    assert "\n" not in line and "\x1b" not in line


def test_a_traceback_follows_its_record_indented_and_escaped() -> None:
    try:
        raise ValueError(FORGED)
    except ValueError:
        line = LogFormatter(FMT).format(record("call failed", exc=True))
    first, *rest = line.split("\n")
    assert first.endswith("zodex.sprite INFO call failed")
    assert rest and all(part.startswith("  ") for part in rest)
    assert not any(part.startswith("2026-12-01") for part in rest), "no continuation looks like a record"
    assert "\x1b" not in line
    # The exception's own newlines stay lines of the traceback, indented like it.
    assert rest[-3:] == [
        "  ValueError: inj",
        "  2026-12-01 00:00:00,000 zodex.sprite INFO stopped",
        "  \\x1b[2J",
    ]


def test_redaction_runs_on_the_escaped_line() -> None:
    secret = "s3cr3t-token-value-0123456789"
    formatter = LogFormatter("%(message)s", lambda text: text.replace(secret, "[redacted]"))
    assert formatter.format(record("key %s in\n%s", secret, FORGED)) == (
        "key [redacted] in\\ninj\\n2026-12-01 00:00:00,000 zodex.sprite INFO stopped\\n\\x1b[2J"
    )
