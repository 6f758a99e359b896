"""Processes and output from the workers' event streams, and recovery after a crash."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from tests.gateway.history.history_support import Clock, exec_call, raw_db
from zodex_gateway.history import HistoryStore
from zodex_gateway.history.chunks import INLINE_BYTES


def test_output_batches_are_kept_in_arrival_order(store: HistoryStore) -> None:
    store.append_output([("h1", "a"), ("h2", "x"), ("h1", "b"), ("h1", ""), ("h1", "c")])
    store.append_output([])
    store.append_output([("h2", "y\r\n\x1b[31mred\x1b[0m"), ("h1", "d🚀")])
    assert store.output("h1") == ("abcd🚀", True)
    assert store.output("h2") == ("xy\r\n\x1b[31mred\x1b[0m", True)
    assert store.output("never") == ("", True)


def test_consecutive_pieces_of_a_handle_share_a_row(store: HistoryStore, history_dir: Path) -> None:
    big = "b" * INLINE_BYTES  # large enough for a frame in a segment file
    store.append_output([("h1", "a"), ("h1", big), ("h2", "x"), ("h1", "c")])
    with raw_db(history_dir) as conn:
        rows = conn.execute(
            "SELECT handle, seq, size, text, segment IS NOT NULL FROM output_chunks ORDER BY handle, seq"
        ).fetchall()
    assert rows == [
        ("h1", 0, 1 + INLINE_BYTES, "", True),
        ("h1", 1, 1, "c", False),  # a small chunk stays in its row
        ("h2", 0, 1, "x", False),
    ]
    assert store.output("h1") == ("a" + big + "c", True)


def test_lone_surrogates_in_output_become_replacement_characters(store: HistoryStore) -> None:
    store.append_output([("h1", "ok \udcff end")])
    text, complete = store.output("h1")
    assert text.startswith("ok ") and text.endswith(" end") and "\ufffd" in text and complete


def test_appends_from_many_threads_stay_ordered_per_handle(store: HistoryStore) -> None:
    def feed(handle: str) -> None:
        for n in range(100):
            store.append_output([(handle, f"{n},")])

    threads = [threading.Thread(target=feed, args=(f"h{t}",)) for t in range(4)]
    for thread in threads:
        thread.start()
    exec_call(store, agent_id=None)  # the loop's own writes interleave with the thread's
    for thread in threads:
        thread.join(timeout=30)
    expected = "".join(f"{n}," for n in range(100))
    assert all(store.output(f"h{t}") == (expected, True) for t in range(4))


def test_process_lifecycle(store: HistoryStore) -> None:
    assert store.process("h1") is None
    store.process_started("h1", pid=4242, cmd="sleep 100", cwd="/w", started_at=10.0)
    running = store.process("h1")
    assert running is not None
    assert (running["pid"], running["cmd"], running["cwd"], running["started_at"]) == (
        4242,
        "sleep 100",
        "/w",
        10.0,
    )
    assert running["ended_at"] is None and running["output_complete"] is True
    store.process_ended("h1", exit_code=-1, signal="SIGKILL", reason="killed", ended_at=12.5)
    ended = store.process("h1")
    assert ended is not None
    assert (ended["exit_code"], ended["signal"], ended["reason"], ended["ended_at"]) == (
        -1,
        "SIGKILL",
        "killed",
        12.5,
    )


def test_incomplete_capture_keeps_the_first_reason(store: HistoryStore) -> None:
    store.append_output([("h1", "partial")])
    store.mark_output_incomplete("h1", "output events were dropped")
    store.mark_output_incomplete("h1", "another reason")
    store.process_started("h1", pid=1, cmd="yes", cwd="/", started_at=1.0)  # arrives late: no reset
    assert store.output("h1") == ("partial", False)
    process = store.process("h1")
    assert process is not None
    assert (process["output_complete"], process["output_incomplete_reason"]) == (
        False,
        "output events were dropped",
    )


def test_reopen_after_a_crash_closes_what_was_left_open(history_dir: Path, clock: Clock) -> None:
    with HistoryStore(history_dir, clock=clock) as store:
        finished = exec_call(store, agent_id="aaaa", handle="done-1")
        store.process_started("done-1", pid=1, cmd="true", cwd="/w", started_at=clock.now)
        store.process_ended("done-1", exit_code=0, signal=None, reason="exit", ended_at=clock.now)
        left = store.begin(
            agent_id="aaaa",
            tool_name="exec_command",
            args={"cmd": "sleep 1000"},
            declared_workdir="/w",
            real_workdir="/w",
        )
        store.process_started("run-1", pid=2, cmd="sleep 1000", cwd="/w", started_at=clock.now)
        store.append_output([("run-1", "started\n")])
    clock.advance(3600)
    with HistoryStore(history_dir, clock=clock) as store:
        found = {inv.id: inv for inv in store.invocations()}
        assert (found[left].status, found[left].incomplete_reason) == (
            "incomplete",
            "runtime stopped before the call completed",
        )
        assert found[left].duration_ms is None and found[left].result is None
        assert (found[finished].status, found[finished].incomplete_reason) == ("ok", None)
        lost = store.process("run-1")
        assert lost is not None
        assert (lost["reason"], lost["ended_at"], lost["exit_code"]) == ("lost", clock.now, None)
        assert lost["output_complete"] is False and "runtime stopped" in lost["output_incomplete_reason"]
        assert store.output("run-1") == ("started\n", False)
        done = store.process("done-1")
        assert done is not None and (done["reason"], done["output_complete"]) == ("exit", True)
        # The call was still running after all (another runtime opened the file): it completes normally.
        store.complete(left, ok=True, result={"summary": "exited 0"})
        assert store.invocations(invocation_id=left)[0].status == "ok"
        assert store.invocations(invocation_id=left)[0].incomplete_reason is None


def test_a_reader_does_not_close_a_live_runtimes_calls(history_dir: Path) -> None:
    with HistoryStore(history_dir) as runtime:
        live = runtime.begin(
            agent_id=None, tool_name="exec_command", args={}, declared_workdir=None, real_workdir=None
        )
        runtime.process_started("h1", pid=1, cmd="sleep 9", cwd="/", started_at=1.0)
        with HistoryStore(history_dir, recover=False) as reader:
            assert reader.invocations()[0].status == "pending"
        process = runtime.process("h1")
        assert runtime.invocations()[0].id == live
        assert (
            runtime.invocations()[0].status == "pending" and process is not None and process["reason"] is None
        )


_CRASH_SCRIPT = """
import os, sys
from pathlib import Path
from zodex_gateway.history import HistoryStore
from zodex_gateway.history.chunks import INLINE_BYTES
store = HistoryStore(Path(sys.argv[1]))
store.begin(agent_id="aaaa", tool_name="exec_command", args={"cmd": "yes"}, declared_workdir="/w", real_workdir="/w")
store.process_started("h-crash", pid=99, cmd="yes", cwd="/w", started_at=1.0)
store.append_output([("h-crash", "y\\n" * 1000)])
os._exit(9)  # no close, no checkpoint: only the WAL holds these
"""


def test_a_killed_runtime_leaves_an_incomplete_record(history_dir: Path) -> None:
    crashed = subprocess.run(
        [sys.executable, "-c", _CRASH_SCRIPT, str(history_dir)],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert crashed.returncode == 9, crashed.stderr
    with HistoryStore(history_dir) as store:
        (call,) = store.invocations()
        assert (call.status, call.incomplete_reason) == (
            "incomplete",
            "runtime stopped before the call completed",
        )
        assert store.output("h-crash") == ("y\n" * 1000, False)
        process = store.process("h-crash")
        assert process is not None and process["reason"] == "lost"
