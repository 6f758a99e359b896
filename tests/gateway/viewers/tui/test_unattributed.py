"""Calls with no agent in the terminal viewer: an "Unattributed" entry beside the agents,
chosen by default when it is the most recent, fed by the snapshot and by live events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gateway.observer.observer_support import BEARER, RUNTIME_ID, Clock, Seeded, call
from tests.gateway.viewers.tui.conftest import Served, _serve
from tests.gateway.viewers.tui.test_live import following
from tests.gateway.viewers.tui.test_model import agent, command, event
from tests.support.gateway import wait_for
from zodex_gateway.history import HistoryStore
from zodex_gateway.local.observer_access import ObserverAccess
from zodex_gateway.observer.hub import EventHub
from zodex_gateway.viewers.tui import render
from zodex_gateway.viewers.tui.model import Board

pytestmark = pytest.mark.timeout(60)


def anon_command(pid: str, **fields: Any) -> dict[str, Any]:
    """A command record of a call with no agent, as the observer sends it."""
    return {**command(pid, **fields), "agent_id": None}


def seed_nothing() -> Seeded:
    return Seeded("", "", "", "", [], "", "", "", "", "", "")


def test_the_unattributed_entry_appears_with_its_first_record() -> None:
    board = Board()
    board.set_agents([agent("ab12", "2025-01-02T00:00:00.000Z")])
    assert [a["agent_id"] for a in board.agents_by_recency()] == ["ab12"], "no such call yet: no entry"
    anon = anon_command("p-anon", updated_at="2025-01-03T00:00:00.000Z")
    board.apply(event("presentation_updated", anon, agent=None))
    entries = board.agents_by_recency()
    assert [a["agent_id"] for a in entries] == ["none", "ab12"], "the most recent first"
    assert entries[0]["unattributed"] and entries[0]["active_processes"] == 1
    assert board.ensure_selection() and board.selected == "none"
    assert [r["presentation_id"] for r in board.view()] == ["p-anon"]
    board.upsert_record(command("p-agent", agent="ab12", started=2000))
    assert [r["presentation_id"] for r in board.view()] == ["p-anon"], "an agent's record is not unattributed"


def test_an_agent_seen_later_than_the_last_unattributed_call_is_chosen() -> None:
    board = Board()
    board.upsert_record(anon_command("p-anon", updated_at="2025-01-01T00:00:00.000Z"))
    board.set_agents([agent("ab12", "2025-01-02T00:00:00.000Z")])
    assert board.ensure_selection() and board.selected == "ab12"


def test_unattributed_is_its_label() -> None:
    entry = Board(selected="none").unattributed()
    assert entry is not None, "chosen (--agent none) before any such call: the entry is there"
    text = render.agent_text(entry).plain
    assert text.startswith("Unattributed\n") and "none" not in text
    title = render.title_text(
        runtime_id="rt1", show_all=False, agent_id="none", alias="", shown=0, query="", older=False
    ).plain
    assert "runtime rt1  ·  Unattributed  ·  0 records" in title


async def test_the_snapshot_chooses_the_unattributed_calls_when_they_are_newest(served: Served) -> None:
    served.clock.tick(60)
    anon = call(served.store, served.clock, agent_id=None, tool="exec_command", args={"cmd": "echo anon"})
    board = Board()
    async with following(served, board) as (live, _states):
        await wait_for(lambda: live.connection.state == "live", what="a live stream")
        assert board.selected == "none"
        assert [r["presentation_id"] for r in board.view()] == [anon]
        assert board.agents_by_recency()[0]["agent_id"] == "none"


async def test_a_live_unattributed_call_is_chosen_when_there_is_no_agent(tmp_path: Path) -> None:
    """No agent and no call yet: the first record of a call with no agent selects it, as the
    first agent would."""
    clock = Clock()
    with HistoryStore(tmp_path / "history", clock=clock) as store:
        hub = EventHub()
        with _serve(store, hub) as (base_url, loop):
            access = ObserverAccess(base_url, BEARER, RUNTIME_ID)
            empty = Served(access, store, clock, seed_nothing(), hub, loop)
            board = Board()
            async with following(empty, board) as (live, _states):
                await wait_for(lambda: live.connection.state == "live", what="a live stream")
                assert board.selected is None and not board.agents_by_recency()
                record = anon_command("inv_anon", updated_at="2025-01-03T00:00:00.000Z")
                empty.publish("presentation_updated", record, agent_id=None, presentation_id="inv_anon")
                await wait_for(lambda: board.selected == "none", what="the unattributed calls chosen")
                assert [r["presentation_id"] for r in board.view()] == ["inv_anon"]
