"""A command record names the pattern the call waiting on it waits for (docs/observer.md):
while an ``exec_command`` or a poll with ``wait_for`` is pending, and never once it ended."""

from __future__ import annotations

from pathlib import Path

from zodex_gateway.history import HistoryStore
from zodex_gateway.observer.timeline import TimelineReader, to_json

CMD = {"cmd": "npm run dev", "workdir": "/work/app"}


def _record(store: HistoryStore, presentation_id: str) -> dict[str, object]:
    record = TimelineReader(store).record(presentation_id)
    assert record is not None
    return to_json(store, record, diffs=False)


def test_the_waiting_call_s_pattern_is_on_its_command(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history")
    try:
        agent = store.agent_for("key-a").agent_id
        begin = {"agent_id": agent, "declared_workdir": "/work/app", "real_workdir": "/work/app"}
        exec_id = store.begin(tool_name="exec_command", args={**CMD, "wait_for": "Listening on"}, **begin)
        store.process_started("h1", pid=7, cmd="npm run dev", cwd="/work/app", started_at=1.0)
        assert _record(store, exec_id)["waiting_for"] == "Listening on"

        running = {"status": "running", "output": "", "cwd": "/work/app", "session_handle": "h1"}
        store.complete(exec_id, ok=True, result={**running, "wait": "yield"}, session_handle="h1")
        assert _record(store, exec_id)["waiting_for"] is None  # nothing waits now

        poll = store.begin(
            tool_name="write_stdin", args={"session_handle": "h1", "wait_for": "ready"},
            session_handle="h1", **begin,
        )  # fmt: skip
        assert _record(store, exec_id)["waiting_for"] == "ready"
        store.complete(poll, ok=True, result={**running, "wait": "matched", "matched_text": "ready"})
        assert _record(store, exec_id)["waiting_for"] is None

        plain = store.begin(
            tool_name="write_stdin", args={"session_handle": "h1"}, session_handle="h1", **begin
        )
        assert _record(store, exec_id)["waiting_for"] is None  # a poll without a pattern
        store.complete(plain, ok=True, result=running)
    finally:
        store.close()
