"""The client and the live loop against a real observer served over HTTP: snapshot, events
through the hub's SSE stream, recovery after a gap, and polling without an event stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.gateway.observer.observer_support import call
from tests.gateway.viewers.tui.conftest import Served
from tests.support.gateway import wait_for
from zodex_gateway.viewers.tui.client import ObserverClient, ObserverError
from zodex_gateway.viewers.tui.live import Connection, Live
from zodex_gateway.viewers.tui.model import Board


@asynccontextmanager
async def following(
    served: Served, board: Board, page_limit: int = 100
) -> AsyncIterator[tuple[Live, list[Connection]]]:
    client = ObserverClient(served.access)
    states: list[Connection] = []
    live = Live(client, board, on_change=lambda: None, on_state=states.append, page_limit=page_limit)
    task = asyncio.create_task(live.run())
    try:
        yield live, states
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await client.aclose()


def new_record(served: Served, pid: str, **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "presentation_id": pid,
        "agent_id": served.seeded.agent_a,
        "kind": "command",
        "started_at_ms": 1_900_000_000_000,
        "updated_at_ms": 1_900_000_000_000,
        "invocation_ids": [pid],
        "command": "echo live",
        "status": "running",
        "output_tail": "",
        "session_handle": "h-live",
        "poll_count": 0,
    }
    record.update(fields)
    return record


async def test_snapshot_then_live_events(served: Served) -> None:
    board = Board(selected=served.seeded.agent_a)
    async with following(served, board) as (live, states):
        await wait_for(lambda: live.connection.state == "live", what="a live stream")
        assert served.seeded.exec_running in board.records, "the snapshot holds the seeded records"
        assert board.agents[served.seeded.agent_a]["alias"] == "builder"
        keys = {"agent_id": served.seeded.agent_a, "presentation_id": "inv_live"}
        served.publish("presentation_updated", new_record(served, "inv_live"), **keys)
        output = {"session_handle": "h-live", "seq": 1, "text": "hi\r\n", "display_text": "hi\n"}
        served.publish("output", output, **keys)
        await wait_for(lambda: board.records.get("inv_live", {}).get("output_tail") == "hi\n", what="output")
        served.publish("agent_updated", {**board.agents[served.seeded.agent_a], "alias": "renamed"}, **keys)
        await wait_for(lambda: board.agents[served.seeded.agent_a]["alias"] == "renamed", what="alias")
    assert states[0] == Connection("live"), "the first state reported is the live stream"


async def test_a_gap_recovers_from_the_timeline(served: Served) -> None:
    board = Board(selected=served.seeded.agent_a)
    async with following(served, board) as (live, _states):
        await wait_for(lambda: live.connection.state == "live", what="a live stream")
        # A call the stream never reported: only the recovery read can find it.
        served.clock.now = 1_900_000_000.0
        unseen = call(
            served.store,
            served.clock,
            agent_id=served.seeded.agent_a,
            tool="exec_command",
            args={"cmd": "true", "workdir": "/work/project"},
            workdir="/work/project",
            result={"status": "exited", "exit_code": 0, "output": ""},
        )
        assert unseen not in board.records
        served.publish("gap", {"reason": "test", "recovery_since_ms": 0})
        await wait_for(lambda: unseen in board.records, what="the recovered record")


async def test_older_pages_and_switching_views(served: Served) -> None:
    board = Board(selected=served.seeded.agent_a)
    async with following(served, board, page_limit=2) as (live, _states):
        await wait_for(lambda: live.connection.state == "live", what="a live stream")
        assert len(board.view()) == 2 and live.has_older()
        while await live.load_older():
            pass
        assert len(board.view()) == 5 and not live.has_older()
        assert board.view()[-1]["presentation_id"] == served.seeded.exec_done, "the oldest is read last"
        await live.select(None)
        assert board.show_all and {r["agent_id"] for r in board.view()} == {
            served.seeded.agent_a,
            served.seeded.agent_b,
        }
        await live.select(served.seeded.agent_b)
        assert [r["presentation_id"] for r in board.view()] == [served.seeded.failed_id]


@pytest.mark.parametrize("served", [False], indirect=True)
async def test_without_an_event_stream_it_polls(served: Served) -> None:
    board = Board(show_all=True)
    async with following(served, board) as (live, _states):
        await wait_for(lambda: live.connection.state == "polling", what="polling")
        assert {served.seeded.exec_done, served.seeded.failed_id} <= set(board.records)
        served.clock.now = 1_900_000_000.0
        later = call(
            served.store,
            served.clock,
            agent_id=served.seeded.agent_b,
            tool="exec_command",
            args={"cmd": "true", "workdir": "/nope"},
            workdir="/nope",
            result={"status": "exited", "exit_code": 0, "output": ""},
        )
        await wait_for(lambda: later in board.records, timeout=15, what="a polled record")


async def test_client_errors_carry_the_status(served: Served) -> None:
    client = ObserverClient(served.access)
    try:
        with pytest.raises(ObserverError) as missing:
            await client.invocation("nope")
        assert missing.value.status == 404 and "nope" in missing.value.message
        detail = await client.invocation(served.seeded.exec_done)
        assert detail["args"]["cmd"] == "ls"
        page = await client.timeline(agent_id=served.seeded.agent_a, limit=2)
        assert len(page.records) == 2 and page.next_cursor
        rest = await client.timeline(agent_id=served.seeded.agent_a, cursor=page.next_cursor)
        assert {r["presentation_id"] for r in page.records}.isdisjoint(
            r["presentation_id"] for r in rest.records
        )
    finally:
        await client.aclose()
    wrong = ObserverClient(type(served.access)(served.access.base_url, "wrong", "rt"))
    try:
        with pytest.raises(ObserverError) as refused:
            await wrong.status()
        assert refused.value.status == 401
    finally:
        await wrong.aclose()
