"""Reading history back with the filters of ``zodex local history``."""

from __future__ import annotations

import pytest

from tests.gateway.history.history_support import Clock
from zodex_gateway.history import HistoryStore


@pytest.fixture
def calls(store: HistoryStore, clock: Clock) -> list[str]:
    """Six calls a minute apart: two agents, two workdirs (one reached through a symlink)."""
    plan = [
        ("aaaa", "/w/one", "/w/one"),
        ("bbbb", "/w/two", "/w/two"),
        ("aaaa", "/link/one", "/w/one"),
        (None, "/w/two", "/w/two"),
        ("bbbb", "/w/one", "/w/one"),
        ("aaaa", None, None),
    ]
    ids = []
    for agent_id, declared, real in plan:
        ids.append(
            store.begin(
                agent_id=agent_id,
                tool_name="exec_command",
                args={"cmd": "true", "workdir": declared},
                declared_workdir=declared,
                real_workdir=real,
            )
        )
        clock.advance(60)
    return ids


def _ids(store: HistoryStore, **filters: object) -> list[str]:
    return [inv.id for inv in store.invocations(**filters)]  # type: ignore[arg-type]


def test_all_oldest_first(store: HistoryStore, calls: list[str]) -> None:
    assert _ids(store) == calls


def test_last_keeps_the_newest_still_oldest_first(store: HistoryStore, calls: list[str]) -> None:
    assert _ids(store, last=2) == calls[-2:]
    assert _ids(store, last=100) == calls
    assert _ids(store, last=0) == []
    with pytest.raises(ValueError):
        store.invocations(last=-1)


def test_since(store: HistoryStore, calls: list[str], clock: Clock) -> None:
    started = [inv.started_at for inv in store.invocations()]
    assert _ids(store, since=started[3]) == calls[3:]
    assert _ids(store, since=clock.now) == []


def test_agent(store: HistoryStore, calls: list[str]) -> None:
    assert _ids(store, agent_id="aaaa") == [calls[0], calls[2], calls[5]]
    assert _ids(store, agent_id="cccc") == []


def test_workdir_matches_declared_or_real(store: HistoryStore, calls: list[str]) -> None:
    assert _ids(store, workdir="/w/one") == [calls[0], calls[2], calls[4]]
    assert _ids(store, workdir="/link/one") == [calls[2]]
    assert _ids(store, workdir="/w/two") == [calls[1], calls[3]]


def test_id(store: HistoryStore, calls: list[str]) -> None:
    assert _ids(store, invocation_id=calls[4]) == [calls[4]]
    assert _ids(store, invocation_id="nope") == []


def test_filters_combine(store: HistoryStore, calls: list[str]) -> None:
    started = [inv.started_at for inv in store.invocations()]
    assert _ids(store, agent_id="aaaa", workdir="/w/one") == [calls[0], calls[2]]
    assert _ids(store, agent_id="aaaa", workdir="/w/one", last=1) == [calls[2]]
    assert _ids(store, agent_id="bbbb", since=started[2]) == [calls[4]]
