"""The viewer's model, rendering and SSE parsing, without a terminal or a network."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2

from zodex_gateway.local.observer_access import ObserverAccess
from zodex_gateway.viewers.tui import render
from zodex_gateway.viewers.tui.client import ObserverClient, ServerEvent
from zodex_gateway.viewers.tui.model import OUTPUT_TAIL_CHARS, Board, search_text


def command(
    pid: str, *, agent: str = "ab12", started: int = 1000, updated: int = 1000, **fields: Any
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "presentation_id": pid,
        "agent_id": agent,
        "kind": "command",
        "started_at_ms": started,
        "updated_at_ms": updated,
        "invocation_ids": [pid],
        "command": "make test",
        "status": "running",
        "cwd": "/work",
        "exit_code": None,
        "termination_reason": None,
        "duration_ms": 1000,
        "output_tail": "",
        "output_truncated": False,
        "poll_count": 0,
        "session_handle": f"h-{pid}",
    }
    record.update(fields)
    return record


def event(
    event_type: str, payload: dict[str, Any], *, sequence: int = 1, agent: str | None = "ab12"
) -> ServerEvent:
    return ServerEvent(sequence, event_type, agent, payload.get("presentation_id"), 5000, payload)


def agent(agent_id: str, last_seen: str, **fields: Any) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "alias": "",
        "first_seen": last_seen,
        "last_seen": last_seen,
        "workdirs": ["/work"],
        "active_processes": 0,
        **fields,
    }


def test_records_upsert_by_presentation_id_and_ignore_older_copies() -> None:
    board = Board(selected="ab12")
    assert board.upsert_record(command("p1", updated=10))
    assert not board.upsert_record(command("p1", updated=10)), "the same copy changes nothing"
    assert board.upsert_record(command("p1", updated=20, status="exited", exit_code=0))
    revision = board.revision("p1")
    assert not board.upsert_record(command("p1", updated=15)), "a stale recovery page is ignored"
    assert board.records["p1"]["status"] == "exited"
    assert board.revision("p1") == revision
    assert [r["presentation_id"] for r in board.view()] == ["p1"]


def test_view_is_newest_first_per_agent_or_interleaved() -> None:
    board = Board(selected="ab12")
    board.upsert_records(
        [
            command("p1", started=1000),
            command("p3", started=3000),
            command("p2", started=2000, agent="cd34"),
        ]
    )
    assert [r["presentation_id"] for r in board.view()] == ["p3", "p1"]
    board.show_all = True
    assert [r["presentation_id"] for r in board.view()] == ["p3", "p2", "p1"]


def test_output_events_fold_into_the_running_command() -> None:
    board = Board(selected="ab12")
    board.upsert_record(command("p1", output_tail="first\n"))
    before = board.revision("p1")
    payload = {
        "session_handle": "h-p1",
        "seq": 1,
        "text": "\x1b[1msecond\x1b[0m\n",
        "display_text": "second\n",
    }
    assert board.apply(event("output", payload))
    assert board.records["p1"]["output_tail"] == "first\nsecond\n"
    assert board.revision("p1") > before
    assert not board.apply(event("output", payload, sequence=2)), "a repeated output seq is skipped"
    big = {"session_handle": "h-p1", "seq": 2, "text": "", "display_text": "x" * OUTPUT_TAIL_CHARS}
    board.apply(event("output", big))
    assert len(board.records["p1"]["output_tail"]) == OUTPUT_TAIL_CHARS
    assert board.records["p1"]["output_truncated"] is True
    unknown = {"session_handle": "h-nobody", "seq": 1, "text": "", "display_text": "lost"}
    assert not board.apply(event("output", unknown))


def test_presentation_updated_replaces_a_folded_record() -> None:
    board = Board(selected="ab12")
    board.upsert_record(command("p1", updated=10))
    board.apply(event("output", {"session_handle": "h-p1", "seq": 1, "display_text": "partial"}))
    stored = command("p1", updated=20, status="exited", exit_code=2, output_tail="all of it\n")
    assert board.apply(event("presentation_updated", stored))
    assert board.records["p1"]["output_tail"] == "all of it\n"
    assert board.records["p1"]["exit_code"] == 2


def test_process_ended_marks_the_command_exited_and_its_agent_stale() -> None:
    board = Board(selected="ab12")
    board.upsert_record(command("p1", started=1000))
    ended = {"session_handle": "h-p1", "exit_code": 3, "signal": None, "reason": "exit", "ended_at_ms": 4500}
    assert board.apply(event("process_ended", ended))
    record = board.records["p1"]
    assert (record["status"], record["exit_code"], record["duration_ms"]) == ("exited", 3, 3500)
    assert board.stale_agents == {"ab12"}
    assert not board.apply(event("process_ended", ended)), "already exited"


def test_agents_and_the_default_selection() -> None:
    board = Board()
    assert not board.ensure_selection(), "no agent yet, nothing to select"
    board.set_agents([agent("old1", "2025-01-01T00:00:00.000Z"), agent("new2", "2025-01-02T00:00:00.000Z")])
    assert board.ensure_selection() and board.selected == "new2"
    board.apply(event("agent_updated", agent("old1", "2025-01-03T00:00:00.000Z", alias="builder")))
    assert board.agents["old1"]["alias"] == "builder"
    assert [a["agent_id"] for a in board.agents_by_recency()] == ["old1", "new2"]
    assert not board.ensure_selection(), "a chosen agent stays chosen"
    everything = Board(show_all=True)
    everything.set_agents([agent("old1", "2025-01-01T00:00:00.000Z")])
    assert not everything.ensure_selection() and everything.selected is None


def test_search_matches_command_output_and_file_paths() -> None:
    board = Board(selected="ab12")
    board.upsert_record(command("p1", command="pytest -q", output_tail="3 passed\n"))
    board.upsert_record(
        {
            "presentation_id": "p2",
            "agent_id": "ab12",
            "kind": "file_changes",
            "started_at_ms": 2000,
            "updated_at_ms": 2000,
            "status": "ok",
            "summary": "Success.",
            "files": [
                {"operation": "edited", "path": "src/App.py", "old_path": None, "added": 1, "removed": 0}
            ],
        }
    )
    assert [r["presentation_id"] for r in board.view("PASSED")] == ["p1"]
    assert [r["presentation_id"] for r in board.view("app.py")] == ["p2"]
    assert board.view("nothing like it") == []
    assert "src/app.py" in search_text(board.records["p2"])


def test_record_lines() -> None:
    running = command("p1", poll_count=2, duration_ms=3000, command="sleep 1\necho done")
    line = render.record_text(running).plain
    assert "$ sleep 1 ↵ echo done" in line and "running · 2 polls · 3.0s" in line
    ticking = render.record_text(command("p4", started=1000, duration_ms=500), now_ms=63_000).plain
    assert "running · 1m02s" in ticking, "a running command shows its elapsed time"
    long = command("p5", status="exited", exit_code=0, duration_ms=40, command="x" * 200)
    cut = render.record_text(long, width=60).plain
    assert len(cut) == 60 and cut.endswith("…  exit 0 · 40ms"), "a long command gives way to its status"
    assert "x" * 200 in render.record_text(long, width=60, expanded=True).plain, "expanded, it is whole"
    killed = command("p6", status="exited", exit_code=-1, termination_reason="killed")
    assert "killed · " in render.record_text(killed).plain
    done = command("p2", status="exited", exit_code=1, duration_ms=40, output_tail="a\nb\n", cwd="/tmp")
    assert "exit 1 · 40ms" in render.record_text(done).plain
    expanded = render.record_text(done, expanded=True, cursor=True).plain.split("\n")
    assert expanded[0].startswith("▸ ")
    assert expanded[1].strip().startswith("cwd /tmp") and [x.strip() for x in expanded[2:]] == ["a", "b"]
    files = {
        "kind": "file_changes",
        "files": [
            {"operation": "created", "path": "new.txt", "added": 1, "removed": 0, "diff": ["+hello"]},
            {
                "operation": "renamed",
                "path": "b.py",
                "old_path": "a.py",
                "added": 0,
                "removed": 0,
                "diff": [],
            },
        ],
    }
    assert "Added new.txt +1 −0, Renamed a.py → b.py +0 −0" in render.record_text(files).plain
    assert "+hello" in render.record_text(files, expanded=True).plain
    stdin = {"kind": "stdin", "chars": "y\n", "session_handle": "h1"}
    assert "stdin 'y\\n'  → h1" in render.record_text(stdin).plain
    failed = {"kind": "generic", "tool_name": "exec_command", "status": "error", "error": "no such dir\nmore"}
    assert "✗ exec_command  no such dir" in render.record_text(failed).plain
    assert "\x1b" not in render.record_text(command("p3", output_tail="\x1b[31mred"), expanded=True).plain
    drawn = {"rows": ["hello from vi", "~"], "cursor": [0, 3], "title": "notes", "alternate": True}
    vi = render.record_text(command("p7", output_tail="garbled", screen=drawn), expanded=True).plain
    rows = [x.strip() for x in vi.split("\n")]
    assert rows[-3:] == ["screen · notes", "hello from vi", "~"] and "garbled" not in vi, rows


def test_file_paths_are_shown_relative_to_the_workdir() -> None:
    record = {
        "kind": "file_changes",
        "workdir": "/work/p",
        "files": [
            {"operation": "edited", "path": "/work/p/src/a.py", "added": 2, "removed": 1},
            {"operation": "edited", "path": "/elsewhere/b.py", "added": 0, "removed": 3},
        ],
    }
    assert "Edited src/a.py +2 −1, Edited /elsewhere/b.py +0 −3" in render.record_text(record).plain


def test_title_says_whose_records_are_shown() -> None:
    common = {"runtime_id": "rt1", "shown": 1, "query": "", "older": False}
    one = render.title_text(show_all=False, agent_id="ab12", alias="builder", **common).plain
    assert "runtime rt1  ·  agent ab12 builder  ·  1 record" in one
    assert "all agents" in render.title_text(show_all=True, agent_id="ab12", alias="", **common).plain
    nobody = render.title_text(show_all=False, agent_id=None, alias="", **common).plain
    assert "agent" not in nobody and "all agents" not in nobody


def test_durations() -> None:
    assert [render.duration(v) for v in (40, 1500, 61_000, 3_700_000, None)] == [
        "40ms",
        "1.5s",
        "1m01s",
        "1h01m",
        "",
    ]


async def test_the_event_stream_reads_frames_and_skips_comments_and_bad_frames() -> None:
    lines = [
        ": connected",
        "",
        "id: 7",
        'data: {"sequence": 7, "event_type": "output", "agent_id": "ab12",',
        'data:  "presentation_id": "p1", "emitted_at_ms": 5, "payload": {"seq": 1}}',
        "",
        ": keepalive",
        "data: not json",
        "",
        "id: 8",
        "",
        "id: 9",
        'data: {"sequence": 9, "event_type": "gap", "payload": {"reason": "subscriber_overflow"}}',
        "",
    ]
    body = "\n".join(lines).encode() + b"\n"
    asked: list[httpx2.Request] = []

    class Dribble(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for at in range(0, len(body), 7):  # frames and lines split across reads
                yield body[at : at + 7]

    def observer(request: httpx2.Request) -> httpx2.Response:
        asked.append(request)
        headers = {"content-type": "text/event-stream; charset=utf-8"}
        return httpx2.Response(200, headers=headers, stream=Dribble())

    access = ObserverAccess("http://127.0.0.1:9", "b" * 32, "rt")
    client = ObserverClient(access, transport=httpx2.MockTransport(observer))
    try:
        events = [event async for event in client.events(last_event_id=6)]
    finally:
        await client.aclose()
    assert events == [
        ServerEvent(7, "output", "ab12", "p1", 5, {"seq": 1}),
        ServerEvent(9, "gap", None, None, 0, {"reason": "subscriber_overflow"}),
    ]
    assert asked[0].headers["last-event-id"] == "6", "a reconnect resumes after the last sequence seen"
    assert asked[0].headers["accept"] == "text/event-stream"
