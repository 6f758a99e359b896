"""History's size: at most the output cap per command, and the size limit (bytes on disk,
database plus WAL plus output segments) kept as history is written, scaled down to a few
megabytes."""

from __future__ import annotations

import base64
import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.gateway.history.history_support import Clock, count_rows, exec_call, raw_db
from tests.support.waiting import wait_until
from zodex_gateway.history import DB_NAME, HISTORY_SCHEMA, HistoryStore, storage
from zodex_gateway.history.output_cap import marker
from zodex_gateway.history.records import OUTPUT_TRIMMED
from zodex_gateway.history.schema import _MIGRATIONS

KIB = 1024
MIB = 1024 * KIB
BATCH = 256 * KIB  # the output capture's batch: the most a write may overshoot by


def numbered_stream(total: int) -> str:
    """Distinct lines, so any cut or reordering shows; random enough that compressing the
    output (segments.py) saves little, as with real output that fills a disk."""
    lines = []
    size = 0
    n = 0
    while size < total:
        line = f"line {n:08d} " + base64.b64encode(os.urandom(30)).decode() + "\r\n"
        lines.append(line)
        size += len(line)
        n += 1
    return "".join(lines)[:total]


def feed(store: HistoryStore, handle: str, text: str, piece: int = 10_000, batch: int = 25) -> None:
    """As the capture does: pieces of events, several pieces per write."""
    pieces = [(handle, text[i : i + piece]) for i in range(0, len(text), piece)]
    for i in range(0, len(pieces), batch):
        store.append_output(pieces[i : i + batch])


def wal_bytes(directory: Path) -> int:
    wal = directory / f"{DB_NAME}-wal"
    return wal.stat().st_size if wal.exists() else 0


# -- the output cap ---------------------------------------------------------------------


def test_a_command_stores_its_first_quarter_and_last_three_quarters(history_dir: Path, clock: Clock) -> None:
    cap = 64 * KIB
    stream = numbered_stream(1 * MIB)
    with HistoryStore(history_dir, clock=clock, output_cap_bytes=cap) as store:
        exec_call(store, agent_id=None, handle="h1")
        feed(store, "h1", stream)
        text, complete = store.output("h1")
        cut = len(stream) - cap
        assert text == stream[: cap // 4] + marker(cut, cap) + stream[-(cap - cap // 4) :]
        assert complete, "a cut is deliberate, not a capture that missed events"
        assert (store.process("h1") or {})["output_cut"] == cut
        assert f"{cut:,} bytes of output cut here" in text
        # Far fewer chunks than a megabyte would take: the middle is gone from the file.
        assert count_rows(history_dir, "output_chunks") < 16


def test_output_within_the_cap_is_whole(store: HistoryStore, history_dir: Path) -> None:
    with HistoryStore(history_dir, output_cap_bytes=64 * KIB, recover=False) as capped:
        stream = numbered_stream(64 * KIB)
        feed(capped, "h1", stream)
        assert capped.output("h1") == (stream, True)
        assert (capped.process("h1") or {})["output_cut"] == 0
        feed(capped, "h1", "!")
        text, _ = capped.output("h1")
        assert text == stream[: 16 * KIB] + marker(1, 64 * KIB) + stream[16 * KIB + 1 :] + "!"


def test_cuts_never_split_a_character(history_dir: Path) -> None:
    cap = 4000
    stream = "".join(f"{n:05d}é€😀\r\n" for n in range(20_000))  # 1-, 2-, 3- and 4-byte characters
    with HistoryStore(history_dir, output_cap_bytes=cap) as store:
        feed(store, "h1", stream, piece=997, batch=3)
        text, _ = store.output("h1")
    head, rest = text.split("\n[zodex: ", 1)
    tail = rest.split("bytes of each command's output]\n", 1)[1]
    assert stream.startswith(head) and stream.endswith(tail)
    assert cap // 4 - 3 <= len(head.encode()) <= cap // 4
    assert cap - cap // 4 - 3 <= len(tail.encode()) <= cap - cap // 4


def test_sessions_are_capped_independently(history_dir: Path) -> None:
    with HistoryStore(history_dir, output_cap_bytes=8 * KIB) as store:
        a, b = numbered_stream(100 * KIB), numbered_stream(5 * KIB)
        pieces = [("a", a[i : i + 1000]) for i in range(0, len(a), 1000)]
        pieces[3:3] = [("b", b)]
        store.append_output(pieces)
        assert store.output("b") == (b, True)
        assert store.output("a")[0].startswith(a[: 2 * KIB] + "\n[zodex: ")


# -- the size limit ---------------------------------------------------------------------


@pytest.fixture
def limited(history_dir: Path, clock: Clock) -> Iterator[HistoryStore]:
    with HistoryStore(history_dir, clock=clock, max_bytes=3 * MIB, output_cap_bytes=512 * KIB) as store:
        yield store


def command(store: HistoryStore, clock: Clock, n: int, output: int = 1 * MIB) -> str:
    invocation = exec_call(store, agent_id="aaaa", cmd=f"yes {n}", handle=f"h{n:03d}")
    store.process_started(f"h{n:03d}", pid=n, cmd=f"yes {n}", cwd="/w", started_at=clock.now)
    feed(store, f"h{n:03d}", numbered_stream(output), piece=16 * KIB, batch=16)
    store.process_ended(f"h{n:03d}", exit_code=0, signal=None, reason="exit", ended_at=clock.now)
    clock.advance(1)
    return invocation


def test_the_limit_holds_as_output_is_written(limited: HistoryStore, history_dir: Path, clock: Clock) -> None:
    ids = []
    for n in range(40):
        ids.append(command(limited, clock, n))
        # Output is trimmed on the writing thread: never more than one batch over.
        assert limited.disk_bytes() <= 3 * MIB + BATCH, n
    kept = [inv.id for inv in limited.invocations()]
    assert kept == ids[-len(kept) :], "only the oldest are removed"
    # 512 KiB stored per command, compressed: the limit less its headroom holds about `fit`
    # of them; deleting more than needed would keep fewer.
    with raw_db(history_dir) as conn:
        per_command = conn.execute(
            "SELECT MAX(total) FROM (SELECT SUM(file_bytes) AS total FROM output_segments GROUP BY handle)"
        ).fetchone()[0]
    fit = (3 * MIB - 3 * MIB // 8) // (per_command + 4 * KIB)
    assert fit - 1 <= len(kept) <= fit + 1, (len(kept), fit)
    assert limited.output("h039")[0].startswith("line 00000000")
    assert limited.process("h000") is None and count_rows(history_dir, "processes") == len(kept)


def test_the_wal_is_truncated_and_space_given_back(
    limited: HistoryStore, history_dir: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "VACUUM_STEP_PAGES", 16)  # many small steps, as a large trim takes
    for n in range(12):
        command(limited, clock, n)
    db = history_dir / DB_NAME
    assert db.stat().st_size <= 3 * MIB
    limited.apply_retention(max_age_s=10**6, max_bytes=3 * MIB)
    assert wal_bytes(history_dir) == 0, "a trim ends with the WAL checkpointed and truncated"
    with raw_db(history_dir) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    # A lower limit shrinks the file itself, not just the rows in it.
    limited.apply_retention(max_age_s=10**6, max_bytes=512 * KIB)
    assert db.stat().st_size + wal_bytes(history_dir) <= 512 * KIB
    assert len(limited.invocations()) == 1


def patch_calls(store: HistoryStore, clock: Clock, count: int) -> None:
    """``count`` completed apply_patch calls of 512 KiB each, a second apart."""
    for n in range(count):
        patch = f"*** Begin Patch {n}\n" + "+" * (512 * KIB)
        call = store.begin(
            agent_id=None,
            tool_name="apply_patch",
            args={"patch": patch},
            declared_workdir=None,
            real_workdir=None,
        )
        store.complete(call, ok=True, result="Success.")
        clock.advance(1)


def test_calls_recorded_on_the_loop_are_trimmed_on_a_thread(history_dir: Path, clock: Clock) -> None:
    with HistoryStore(history_dir, clock=clock, max_bytes=2 * MIB) as store:
        patch_calls(store, clock, 12)
        wait_until(lambda: store.disk_bytes() <= 2 * MIB, what="the trimming thread to catch up")
        assert 2 <= len(store.invocations()) <= 4


def test_completing_a_call_counts_the_arguments_its_row_rewrites(history_dir: Path, clock: Clock) -> None:
    # Completing a call updates its row, and SQLite writes the whole row again, a 512 KiB
    # patch included. Counted as a small write, the second completion takes the files over
    # the limit while the size limit believes there is room, and no trim follows.
    with HistoryStore(history_dir, clock=clock, max_bytes=2 * MIB) as store:
        patch_calls(store, clock, 2)
        wait_until(lambda: store.disk_bytes() <= 2 * MIB, what="a trim once the completion crossed the limit")


def test_many_small_calls_are_trimmed_too(history_dir: Path, clock: Clock) -> None:
    # Small writes measure the files only once what they may have added could reach the
    # limit: thousands of them must still come back under it.
    with HistoryStore(history_dir, clock=clock, max_bytes=1 * MIB) as store:
        for n in range(4000):
            exec_call(store, agent_id="aaaa", cmd=f"echo {n} " + "x" * 200)
            clock.advance(0.01)
        wait_until(lambda: store.disk_bytes() <= 1 * MIB, what="the trimming thread to catch up")
        kept = len(store.invocations())
        assert 0 < kept < 4000
        exec_call(store, agent_id="aaaa")
        assert store.disk_bytes() <= 1 * MIB + 256 * KIB


def test_newest_and_pending_calls_are_kept_over_the_limit(history_dir: Path, clock: Clock) -> None:
    with HistoryStore(history_dir, clock=clock, max_bytes=256 * KIB) as store:
        big = {"patch": "+" * (400 * KIB)}
        pending = store.begin(
            agent_id=None, tool_name="apply_patch", args=big, declared_workdir=None, real_workdir=None
        )
        clock.advance(1)
        done = store.begin(
            agent_id=None, tool_name="apply_patch", args=big, declared_workdir=None, real_workdir=None
        )
        store.complete(done, ok=True, result="Success.")
        clock.advance(1)
        newest = store.begin(
            agent_id=None, tool_name="apply_patch", args=big, declared_workdir=None, real_workdir=None
        )
        store.complete(newest, ok=True, result="Success.")
        wait_until(lambda: len(store.invocations()) == 2, what="the completed older call to go")
        assert [inv.id for inv in store.invocations()] == [pending, newest]
        assert store.apply_retention(max_age_s=10**6, max_bytes=1) == 0


def test_a_running_command_whose_calls_were_trimmed_keeps_the_limit(
    history_dir: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    limit = 3 * MIB
    running = {"status": "running", "output": "", "session_handle": "hrun"}
    with HistoryStore(history_dir, clock=clock, max_bytes=limit, output_cap_bytes=16 * MIB) as store:
        exec_call(store, agent_id="aaaa", cmd="yes", handle="hrun", result=running)
        store.process_started("hrun", pid=1, cmd="yes", cwd="/w", started_at=clock.now)
        # The command floods while the model goes on with other calls: its exec call is
        # soon the oldest, and trimmed, while the command still prints.
        for n in range(16):
            clock.advance(1)
            exec_call(store, agent_id="aaaa", cmd=f"echo {n}")
            feed(store, "hrun", numbered_stream(1 * MIB), piece=16 * KIB, batch=16)
            assert store.disk_bytes() <= limit + BATCH, n
        assert store.process("hrun") is not None, "a running command keeps its row"
        assert (store.process("hrun") or {})["output_incomplete_reason"] == OUTPUT_TRIMMED
        assert store.stored_bytes() <= limit
        # A later poll refers to the session again: its output is stored again.
        poll = store.begin(
            agent_id="aaaa", tool_name="write_stdin", args={}, declared_workdir=None, real_workdir=None,
            session_handle="hrun",
        )  # fmt: skip
        store.complete(poll, ok=True, result=running)
        store.append_output([("hrun", "after the poll\n")])
        assert store.output("hrun") == ("after the poll\n", False)
        store.process_ended("hrun", exit_code=0, signal=None, reason="exit", ended_at=clock.now)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_warning_over_the_limit_is_logged_once(
    history_dir: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    with HistoryStore(history_dir, clock=clock, max_bytes=1 * MIB, output_cap_bytes=16 * MIB) as store:
        # A pending call's command prints past the limit: it is kept, and so is the excess.
        pending = store.begin(
            agent_id="aaaa", tool_name="exec_command", args={}, declared_workdir=None, real_workdir=None
        )
        store.process_started("hbig", pid=1, cmd="yes", cwd="/w", started_at=clock.now, invocation_id=pending)
        for n in range(20):
            clock.advance(1)
            exec_call(store, agent_id="aaaa", cmd=f"echo {n}")
            feed(store, "hbig", numbered_stream(256 * KIB), piece=16 * KIB, batch=16)
        store.apply_retention(max_age_s=10**6, max_bytes=1 * MIB)
    over = [r for r in caplog.records if "holds only its newest and pending calls" in r.getMessage()]
    assert len(over) == 1, [r.getMessage() for r in over]


# -- an older history -------------------------------------------------------------------


def make_version_1(directory: Path) -> None:
    """A history as the first schema wrote it: no auto-vacuum, no output counters."""
    directory.mkdir(parents=True)
    with closing(sqlite3.connect(directory / DB_NAME, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN")
        _MIGRATIONS[1](conn)
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO invocations (id, tool_name, args, status, started_at, session_handle, size)"
            " VALUES ('old1', 'exec_command', '{}', 'ok', 1.0, 'h-old', 300)"
        )
        conn.execute(
            "INSERT INTO processes (handle, cmd, started_at, ended_at, size) VALUES ('h-old', 'yes', 1, 2, 64)"
        )
        for seq in range(40):
            conn.execute(
                "INSERT INTO output_chunks (handle, seq, text, size) VALUES ('h-old', ?, ?, ?)",
                (seq, "o" * 50_000, 50_000),
            )
        conn.execute("COMMIT")
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0


def test_an_older_history_is_migrated_and_stays_readable(history_dir: Path, clock: Clock) -> None:
    make_version_1(history_dir)
    with HistoryStore(history_dir, clock=clock, max_bytes=100 * MIB, output_cap_bytes=MIB) as store:
        assert store.output("h-old") == ("o" * 2_000_000, True)
        assert [inv.id for inv in store.invocations()] == ["old1"]
        with raw_db(history_dir) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == HISTORY_SCHEMA == 5
            assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
            assert conn.execute("SELECT output_bytes FROM processes").fetchone()[0] == 2_000_000
        exec_call(store, agent_id=None)
        before = (history_dir / DB_NAME).stat().st_size
        store.apply_retention(max_age_s=10**6, max_bytes=64 * KIB)
        assert store.output("h-old") == ("", True)
        # Incremental vacuum gives the two megabytes back to the file system.
        assert (history_dir / DB_NAME).stat().st_size < before - 1_500_000
