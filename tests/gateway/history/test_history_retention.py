"""Retention: whole invocations, oldest first, until age and size both hold; the newest stays.

The size limit (bytes on disk) as history is written: test_history_size.py."""

from __future__ import annotations

from pathlib import Path

from tests.gateway.history.history_support import DAY, Clock, count_rows, exec_call
from zodex_gateway.history import FileChange, HistoryStore
from zodex_gateway.history.store import RETENTION_BATCH

BIG = 60_000


def _padded_call(store: HistoryStore, n: int) -> str:
    """Calls of equal stored size, so a size limit keeps a predictable number."""
    return exec_call(store, agent_id="aaaa", cmd=f"echo {n:04d} " + "x" * BIG)


def _ids(store: HistoryStore) -> list[str]:
    return [inv.id for inv in store.invocations()]


def test_nothing_to_trim(store: HistoryStore) -> None:
    assert store.apply_retention(max_age_s=DAY, max_bytes=1) == 0
    exec_call(store, agent_id=None)
    assert store.apply_retention(max_age_s=DAY, max_bytes=10**9) == 0


def test_age_limit_removes_old_calls_only(store: HistoryStore, clock: Clock) -> None:
    old = exec_call(store, agent_id=None)
    clock.advance(30 * DAY)
    middle = exec_call(store, agent_id=None)
    clock.advance(20 * DAY)
    newest = exec_call(store, agent_id=None)
    assert store.apply_retention(max_age_s=60 * DAY, max_bytes=10**9, now=clock.now + 20 * DAY) == 1
    assert _ids(store) == [middle, newest]
    # Far in the future everything is too old, but the newest call always stays.
    assert store.apply_retention(max_age_s=60 * DAY, max_bytes=10**9, now=clock.now + 999 * DAY) == 1
    assert _ids(store) == [newest]
    assert old not in _ids(store)


def test_age_limit_uses_the_clock_by_default(store: HistoryStore, clock: Clock) -> None:
    exec_call(store, agent_id=None)
    clock.advance(10)
    kept = exec_call(store, agent_id=None)
    assert store.apply_retention(max_age_s=5, max_bytes=10**9) == 1
    assert _ids(store) == [kept]


def test_newest_is_kept_even_alone_over_the_limit(store: HistoryStore) -> None:
    ids = [_padded_call(store, n) for n in range(3)]
    assert store.apply_retention(max_age_s=999 * DAY, max_bytes=1) == 2
    assert _ids(store) == ids[-1:]
    assert store.apply_retention(max_age_s=999 * DAY, max_bytes=1) == 0
    assert _ids(store) == ids[-1:]


def test_pending_calls_are_never_removed(store: HistoryStore, clock: Clock) -> None:
    pending = store.begin(
        agent_id=None, tool_name="exec_command", args={}, declared_workdir=None, real_workdir=None
    )
    clock.advance(DAY)
    newest = exec_call(store, agent_id=None)
    assert store.apply_retention(max_age_s=1, max_bytes=1, now=clock.now + DAY) == 0
    assert _ids(store) == [pending, newest]


def test_a_session_goes_with_the_last_call_that_refers_to_it(
    store: HistoryStore, clock: Clock, history_dir: Path
) -> None:
    exec_call(store, agent_id="aaaa", handle="h1-x")
    store.process_started("h1-x", pid=1, cmd="cat", cwd="/w", started_at=clock.now)
    store.append_output([("h1-x", "o" * 50_000)])
    clock.advance(DAY)
    poll = store.begin(
        agent_id="bbbb",
        tool_name="write_stdin",
        args={"session_handle": "h1-x"},
        declared_workdir=None,
        real_workdir=None,
        session_handle="h1-x",
    )
    store.complete(poll, ok=True, result={"summary": "exited 0"})
    store.process_ended("h1-x", exit_code=0, signal=None, reason="exit", ended_at=clock.now)
    clock.advance(10 * DAY)
    exec_call(store, agent_id="aaaa")

    # The exec goes; the write_stdin still refers to the session, so its output stays.
    assert store.apply_retention(max_age_s=10.5 * DAY, max_bytes=10**9) == 1
    assert store.output("h1-x") == ("o" * 50_000, True)
    assert store.process("h1-x") is not None

    (segment,) = (history_dir / "output").iterdir()  # the output, compressed
    segment_bytes = segment.stat().st_size
    before, on_disk = store.stored_bytes(), store.disk_bytes()
    assert store.apply_retention(max_age_s=DAY, max_bytes=10**9) == 1
    assert store.output("h1-x") == ("", True)
    assert store.process("h1-x") is None
    assert not segment.exists(), "the segment file goes with the session's rows"
    assert before - store.stored_bytes() >= segment_bytes
    assert on_disk - store.disk_bytes() >= segment_bytes
    assert count_rows(history_dir, "output_segments") == 0
    assert count_rows(history_dir, "output_chunks") == 0


def test_orphaned_sessions_are_swept_after_a_grace_period(store: HistoryStore, clock: Clock) -> None:
    # Events for a command whose exec call is gone (or was never completed).
    store.process_started("orphan", pid=1, cmd="true", cwd="/", started_at=clock.now)
    store.append_output([("orphan", "lost output")])
    store.process_ended("orphan", exit_code=0, signal=None, reason="exit", ended_at=clock.now)
    store.process_started("young", pid=2, cmd="true", cwd="/", started_at=clock.now)
    store.process_ended("young", exit_code=0, signal=None, reason="exit", ended_at=clock.now + 7200)
    exec_call(store, agent_id=None)
    store.apply_retention(max_age_s=999 * DAY, max_bytes=10**9, now=clock.now + 7200)
    assert store.process("orphan") is None and store.output("orphan") == ("", True)
    assert store.process("young") is not None  # its exec call may still be completing


def test_file_evidence_goes_with_its_call(store: HistoryStore, clock: Clock, history_dir: Path) -> None:
    patch = store.begin(
        agent_id=None, tool_name="apply_patch", args={"patch": "…"}, declared_workdir="/w", real_workdir="/w"
    )
    store.complete(
        patch, ok=True, result="Success.", files=[FileChange("add", "/w/a", None, 1, 0, ("+a" * 5000,))]
    )
    clock.advance(DAY)
    exec_call(store, agent_id=None)
    assert store.apply_retention(max_age_s=1, max_bytes=10**9) == 1
    assert count_rows(history_dir, "file_changes") == 0


def test_large_trims_run_in_batches(store: HistoryStore, clock: Clock) -> None:
    for _ in range(RETENTION_BATCH * 2 + 10):
        exec_call(store, agent_id=None)
    clock.advance(DAY)
    newest = exec_call(store, agent_id=None)
    assert store.apply_retention(max_age_s=DAY / 2, max_bytes=10**9) == RETENTION_BATCH * 2 + 10
    assert _ids(store) == [newest]
