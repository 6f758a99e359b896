"""Calls with no agent (a client without a session): ``agent_id=none`` selects them on the
timeline, the invocations list and the event stream, and only them; any other agent id
filters as before."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.gateway.observer.observer_support import Clock, Seeded, call
from tests.gateway.observer.test_observer_events import serving, wait_subscribed
from tests.support.sse import sse
from zodex_gateway.history import NO_AGENT, HistoryStore, agent_matches
from zodex_gateway.history import ids as history_ids
from zodex_gateway.observer.feed import ObserverFeed
from zodex_gateway.observer.hub import EventHub
from zodex_protocol.events import OutputEvent, ProcessEnded, ProcessStarted

pytestmark = pytest.mark.timeout(60)


def unattributed_exec(store: HistoryStore, clock: Clock, n: int) -> str:
    return call(
        store,
        clock,
        agent_id=None,
        tool="exec_command",
        args={"cmd": f"echo {n}", "workdir": "/work/anon"},
        workdir="/work/anon",
        result={"summary": "exited 0", "status": "exited", "output": f"{n}\n", "exit_code": 0},
    )


def ids(body: dict[str, Any], key: str = "records") -> list[str]:
    return [entry["presentation_id" if key == "records" else "id"] for entry in body[key]]


def walk(client: TestClient, route: str, **params: str) -> list[str]:
    key = "records" if route == "/v1/timeline" else "invocations"
    walked: list[str] = []
    cursor = None
    while True:
        body = client.get(route, params={**params, **({"cursor": cursor} if cursor else {})}).json()
        walked += ids(body, key)
        cursor = body["next_cursor"]
        if cursor is None:
            return walked


def test_timeline_none_is_exactly_the_calls_with_no_agent_and_pages(
    client: TestClient, seeded: Seeded, store: HistoryStore, clock: Clock
) -> None:
    anon = [unattributed_exec(store, clock, n) for n in range(5)]
    # An agent's call after them: "none" must not take it, nor lose its own calls among others.
    later = call(store, clock, agent_id=seeded.agent_b, tool="exec_command", args={"cmd": "true"})
    newest_first = list(reversed(anon))
    first = client.get("/v1/timeline", params={"agent_id": "none"}).json()
    assert ids(first) == newest_first
    assert all(record["agent_id"] is None for record in first["records"])
    assert walk(client, "/v1/timeline", agent_id="none", limit="2") == newest_first
    assert walk(client, "/v1/invocations", agent_id="none", limit="2") == newest_first
    everything = ids(client.get("/v1/timeline", params={"limit": "100"}).json())
    assert set(anon) < set(everything) and later in everything
    of_b = ids(client.get("/v1/timeline", params={"agent_id": seeded.agent_b}).json())
    assert of_b == [later, seeded.failed_id]
    # With a workdir too: both filters apply.
    assert walk(client, "/v1/timeline", agent_id="none", workdir="/work/anon") == newest_first
    assert walk(client, "/v1/timeline", agent_id="none", workdir="/work/other") == []
    # What changed since a moment: only the calls with no agent.
    since_ms = str(client.get(f"/v1/timeline/{anon[3]}").json()["started_at_ms"])
    recovered = client.get("/v1/timeline", params={"agent_id": "none", "recovery_since_ms": since_ms})
    assert ids(recovered.json()) == [anon[4], anon[3]]


def test_no_unattributed_calls_is_an_empty_page(client: TestClient, seeded: Seeded) -> None:
    for route in ("/v1/timeline", "/v1/invocations"):
        body = client.get(route, params={"agent_id": "none"}).json()
        assert body["next_cursor"] is None
        assert body["records" if route == "/v1/timeline" else "invocations"] == []


@pytest.mark.parametrize("agent_id", ["zzzz", "None", "NONE", "null", "none ", "nonе"])
def test_any_other_agent_id_filters_as_before(
    client: TestClient, seeded: Seeded, store: HistoryStore, clock: Clock, agent_id: str
) -> None:
    """Only the exact word selects the calls with no agent; an id no agent has finds
    nothing, as it always did."""
    unattributed_exec(store, clock, 1)
    for route, key in (("/v1/timeline", "records"), ("/v1/invocations", "invocations")):
        response = client.get(route, params={"agent_id": agent_id, "limit": "100"})
        assert response.status_code == 200
        assert response.json()[key] == []
    recovered = client.get("/v1/timeline", params={"agent_id": agent_id, "recovery_since_ms": "0"})
    assert recovered.json()["records"] == []


def test_none_is_no_agent(client: TestClient, seeded: Seeded) -> None:
    assert client.get("/v1/agents/none").json() == {"schema_version": 1, "error": "no agent none"}
    put = client.put("/v1/agents/none/alias", json={"alias": "x"})
    assert put.status_code == 404
    assert NO_AGENT not in {agent["agent_id"] for agent in client.get("/v1/agents").json()["agents"]}


def test_none_is_never_issued_as_an_agent_id(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = iter("none" + "n0ne")
    monkeypatch.setattr(secrets, "choice", lambda _alphabet: next(drawn))
    assert history_ids.new_agent_id() == "n0ne"


def test_agent_matches() -> None:
    assert agent_matches(None, None) and agent_matches(None, "ab12")
    assert agent_matches("none", None) and not agent_matches("none", "ab12")
    assert agent_matches("ab12", "ab12") and not agent_matches("ab12", None)


async def test_events_of_unattributed_calls_carry_null_and_none_selects_them(
    store: HistoryStore, clock: Clock
) -> None:
    """Through the feed the runtime uses: a call with no agent and an agent's call, each
    with its process and output; ``agent_id=none`` gets the first's events, only them."""
    agent = store.agent_for("a-conversation-key-" + "k" * 24).agent_id
    hub = EventHub()
    feed = ObserverFeed(store, hub)
    async with (
        serving(store, hub) as url,
        sse(url, "observer-bearer-" + "b" * 32, "?agent_id=none") as only_none,
        sse(url, "observer-bearer-" + "b" * 32, f"?agent_id={agent}") as only_agent,
        sse(url, "observer-bearer-" + "b" * 32, "?output_agent_ids=none") as output_of_none,
        sse(url, "observer-bearer-" + "b" * 32) as everything,
    ):
        await wait_subscribed(hub, 4)
        for owner, handle in ((None, "h-anon"), (agent, "h-agent")):
            inv = store.begin(
                agent_id=owner,
                tool_name="exec_command",
                args={"cmd": f"echo {handle}"},
                declared_workdir="/w",
                real_workdir="/w",
                session_handle=None,
            )
            feed.call_started(inv)
            store.process_started(
                handle, pid=7, cmd="echo", cwd="/w", started_at=clock.now, invocation_id=inv
            )
            clock.tick(0.1)
            store.complete(inv, ok=True, result={"status": "running"}, session_handle=handle)
            feed.call_completed(inv)
            feed.worker_events(
                [
                    ProcessStarted(handle, 7, "echo", "/w", clock.now, inv),
                    OutputEvent(handle, 1, f"out of {handle}\n"),
                    ProcessEnded(handle, 0, None, "exit", clock.tick(0.1), 0, 1),
                ]
            )
        # Every filter lets a gap through: read each stream up to this one, and all the
        # events before it have been delivered (or filtered out).
        hub.publish("gap", {"reason": "end of test"})
        for stream in (only_none, only_agent, output_of_none, everything):
            await stream.until(lambda e: e["event_type"] == "gap")
    expected = [
        "invocation_started",
        "presentation_updated",
        "invocation_completed",
        "presentation_updated",
        "process_started",
        "output",
        "process_ended",
        "output_complete",
        "presentation_updated",
    ]
    assert [e["event_type"] for e in everything.events if e["agent_id"] is None] == [*expected, "gap"]
    assert [e["event_type"] for e in only_none.events] == [*expected, "gap"]
    assert all(e["agent_id"] is None for e in only_none.events)
    assert [e["payload"]["text"] for e in only_none.of_type("output")] == ["out of h-anon\n"]
    assert only_agent.events[-1]["event_type"] == "gap"
    assert {e["agent_id"] for e in only_agent.events[:-1]} == {agent}
    assert len(only_agent.events) > len(expected), "the agent's own events, agent_updated included"
    assert [e["payload"]["text"] for e in output_of_none.of_type("output")] == ["out of h-anon\n"]
    assert {e["agent_id"] for e in output_of_none.events} == {None, agent}, (
        "output_agent_ids limits output only"
    )
