"""Invocations: recorded before the side effect, completed after, read back exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gateway.history.history_support import Clock, exec_call, raw_db
from zodex_gateway.history import FileChange, HistoryStore

STRUCTURED: dict[str, Any] = {
    "summary": "exited 0 after 0.4s",
    "status": "exited",
    "output": "héllo wörld ✓ 日本語 🚀\n\ttab\n",
    "cwd": "/work/project",
    "wall_time_ms": 412,
    "exit_code": 0,
    "termination_reason": "exit",
    "nested": {"list": [1, 2.5, None, True], "empty": {}},
}


@pytest.mark.parametrize(
    "result",
    [
        STRUCTURED,
        "Success. Updated the following files:\nM /work/project/ü.py\n",
        "",
        "\ud800 lone surrogate and \x00 NUL",
    ],
    ids=["structured", "text", "empty-text", "odd-text"],
)
def test_begin_then_complete_round_trips_exactly(store: HistoryStore, clock: Clock, result: Any) -> None:
    args = {
        "cmd": "printf 'é\\n' | cat -A",
        "workdir": "/work/project",
        "yield_time_ms": 50,
        "unicode": "ß\ud83d",
    }
    invocation_id = store.begin(
        agent_id="k7m2",
        tool_name="exec_command",
        args=args,
        declared_workdir="/work/project",
        real_workdir="/private/work/project",
    )
    (pending,) = store.invocations()
    assert (pending.id, pending.status, pending.result, pending.duration_ms) == (
        invocation_id,
        "pending",
        None,
        None,
    )
    assert pending.started_at == clock.now
    clock.advance(0.4125)
    store.complete(invocation_id, ok=True, result=result)
    (done,) = store.invocations()
    assert done.args == args
    assert done.result == result and type(done.result) is type(result)
    assert (done.status, done.duration_ms, done.error) == ("ok", 412, None)
    assert (done.agent_id, done.tool_name) == ("k7m2", "exec_command")
    assert (done.declared_workdir, done.real_workdir) == ("/work/project", "/private/work/project")


def test_stored_json_is_readable_text(store: HistoryStore, history_dir: Path) -> None:
    exec_call(store, agent_id=None, cmd="echo ünïcode", result=STRUCTURED)
    with raw_db(history_dir) as conn:
        args, result = conn.execute("SELECT args, result FROM invocations").fetchone()
    assert '"cmd": "echo ünïcode"' in args  # ensure_ascii=False: no \\u escapes
    assert "日本語" in result


def test_error_outcome(store: HistoryStore, clock: Clock) -> None:
    invocation_id = store.begin(
        agent_id=None,
        tool_name="apply_patch",
        args={"patch": "*** Begin Patch\n*** End Patch", "workdir": "/nope"},
        declared_workdir="/nope",
        real_workdir=None,
    )
    clock.advance(2)
    store.complete(
        invocation_id, ok=False, result="workdir does not exist: /nope", error="workdir does not exist: /nope"
    )
    (done,) = store.invocations()
    assert (done.status, done.error, done.result, done.duration_ms) == (
        "error",
        "workdir does not exist: /nope",
        "workdir does not exist: /nope",
        2000,
    )
    assert done.real_workdir is None


def test_apply_patch_file_evidence(store: HistoryStore) -> None:
    changes = [
        FileChange(
            "update", "/w/src/a.py", None, 2, 1, ("@@ def f():", "-    return 1", "+    return 2", "+    # ✓")
        ),
        FileChange("move", "/w/src/new.py", "/w/src/old.py", 0, 0, ()),
        FileChange("add", "/w/README.md", None, 1, 0, ("+# Title",)),
    ]
    invocation_id = store.begin(
        agent_id="ab12",
        tool_name="apply_patch",
        args={"patch": "…"},
        declared_workdir="/w",
        real_workdir="/w",
    )
    store.complete(invocation_id, ok=True, result="Success. Updated the following files:\n…", files=changes)
    assert store.invocations()[0].files == tuple(changes)


def test_complete_twice_or_after_removal_changes_nothing(store: HistoryStore, history_dir: Path) -> None:
    invocation_id = exec_call(store, agent_id=None, result={"summary": "first"})
    store.complete(invocation_id, ok=False, result={"summary": "second"}, error="late")
    assert store.invocations()[0].result == {"summary": "first"}
    store.complete("0000000000000", ok=True, result="nobody")  # e.g. removed by retention meanwhile
    assert len(store.invocations()) == 1


def test_write_stdin_records_the_sessions_creator(store: HistoryStore) -> None:
    owner = store.agent_for("conversation-owner").agent_id
    guest = store.agent_for("conversation-guest").agent_id
    exec_call(store, agent_id=owner, handle="abcdefg1-0123456789")

    def write(agent_id: str | None, handle: str) -> str:
        return store.begin(
            agent_id=agent_id,
            tool_name="write_stdin",
            args={"session_handle": handle, "chars": "y\n"},
            declared_workdir=None,
            real_workdir=None,
            session_handle=handle,
        )

    own = write(owner, "abcdefg1-0123456789")
    other = write(guest, "abcdefg1-0123456789")
    unknown = write(guest, "zzzzzzz1-0000000000")
    # A write_stdin's completion does not make its caller the creator.
    store.complete(other, ok=True, result={"summary": "ok"}, session_handle="abcdefg1-0123456789")
    anonymous = write(None, "abcdefg1-0123456789")
    found = {inv.id: inv for inv in store.invocations()}
    assert (found[own].handle_creator, found[own].cross_agent) == (owner, False)
    assert (found[other].handle_creator, found[other].cross_agent) == (owner, True)
    assert (found[unknown].handle_creator, found[unknown].cross_agent) == (None, False)
    assert (found[anonymous].handle_creator, found[anonymous].cross_agent) == (owner, True)
    assert found[other].session_handle == "abcdefg1-0123456789"


def test_the_first_exec_to_complete_with_a_handle_is_its_creator(store: HistoryStore) -> None:
    store.process_started("h1-x", pid=42, cmd="sleep 5", cwd="/w", started_at=1.0)  # events may come first
    exec_call(store, agent_id="aaaa", handle="h1-x")
    exec_call(store, agent_id="bbbb", handle="h1-x")  # cannot happen; still, the first one stays
    process = store.process("h1-x")
    assert process is not None
    assert (process["creator_agent_id"], process["pid"], process["cmd"]) == ("aaaa", 42, "sleep 5")


def test_invocation_ids_are_short_unique_and_sorted_by_time(store: HistoryStore, clock: Clock) -> None:
    ids = []
    for _ in range(200):
        ids.append(exec_call(store, agent_id=None))
        clock.advance(0.01)
    assert len(set(ids)) == 200
    assert ids == sorted(ids)
    assert all(len(i) == 13 and i.isalnum() and i.islower() for i in ids)


def test_same_millisecond_keeps_arrival_order(store: HistoryStore) -> None:
    ids = [exec_call(store, agent_id=None, cmd=f"echo {n}") for n in range(20)]  # the clock stands still
    assert [inv.id for inv in store.invocations()] == ids
