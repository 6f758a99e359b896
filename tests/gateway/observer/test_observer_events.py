"""``/v1/events`` over a real HTTP server: order, ids, filters, keepalive, resume, and a
slow subscriber that gets a gap while a fast one receives everything."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from tests.gateway.observer.observer_support import BASE_URL, BEARER, RUNTIME_ID, T0
from tests.support.gateway import wait_for
from tests.support.slowdown import scaled
from tests.support.sse import SseStream, sse
from zodex_gateway.history import HistoryStore
from zodex_gateway.observer import create_observer_app
from zodex_gateway.observer.hub import (
    RING_BYTES,
    SUBSCRIBER_QUEUE,
    SUBSCRIBER_QUEUE_BYTES,
    EventFilter,
    EventHub,
)

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def serving(store: HistoryStore, hub: EventHub, keepalive_s: float = 15.0) -> AsyncIterator[str]:
    app = create_observer_app(
        store, runtime_id=RUNTIME_ID, bearer_token=BEARER, started_at=T0, hub=hub, keepalive_s=keepalive_s
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await wait_for(lambda: server.started, what="the observer app to start")
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        hub.close()
        server.should_exit = True
        await task


def publish_output(hub: EventHub, agent: str, text: str) -> None:
    hub.publish(
        "output", {"session_handle": "h", "seq": 1, "text": text, "display_text": text}, agent_id=agent
    )


async def test_frames_carry_sequence_type_agent_presentation_and_payload(store: HistoryStore) -> None:
    hub = EventHub()
    async with serving(store, hub) as url, sse(url, BEARER) as stream:
        await wait_subscribed(hub)
        hub.publish("invocation_started", {"id": "i1"}, agent_id="ab12", presentation_id="i1")
        publish_output(hub, "ab12", "hello\n")
        hub.publish("process_ended", {"session_handle": "h"}, agent_id="ab12", presentation_id="i1")
        events = [await stream.until(lambda e: True) for _ in range(3)]
    assert [e["event_type"] for e in events] == ["invocation_started", "output", "process_ended"]
    assert [e["sequence"] for e in events] == [1, 2, 3]
    assert stream.ids == [1, 2, 3], "each frame's id is its sequence (Last-Event-ID resumes from it)"
    assert set(events[0]) == {
        "sequence",
        "event_type",
        "agent_id",
        "presentation_id",
        "emitted_at_ms",
        "payload",
    }
    assert events[0]["agent_id"] == "ab12" and events[0]["presentation_id"] == "i1"
    assert events[1]["payload"]["text"] == "hello\n"
    assert "connected" in stream.comments


async def test_keepalive_comments_while_idle(store: HistoryStore) -> None:
    hub = EventHub()
    async with serving(store, hub, keepalive_s=0.1) as url, sse(url, BEARER) as stream:
        reader = asyncio.create_task(stream.next_frame())
        await wait_for(lambda: stream.comments.count("keepalive") >= 2, what="two keepalive comments")
        reader.cancel()


async def test_filters(store: HistoryStore) -> None:
    hub = EventHub()
    async with (
        serving(store, hub) as url,
        sse(url, BEARER, "?agent_id=aaaa") as only_a,
        sse(url, BEARER, "?include_output=false") as no_output,
        sse(url, BEARER, "?output_agent_ids=bbbb,cccc") as output_of_b,
    ):
        await wait_subscribed(hub, 3)
        hub.publish("agent_updated", {"agent_id": "aaaa"}, agent_id="aaaa")
        hub.publish("agent_updated", {"agent_id": "bbbb"}, agent_id="bbbb")
        publish_output(hub, "aaaa", "from a")
        publish_output(hub, "bbbb", "from b")
        hub.publish("process_ended", {}, agent_id="aaaa")
        await only_a.until(lambda e: e["event_type"] == "process_ended")
        await no_output.until(lambda e: e["event_type"] == "process_ended")
        await output_of_b.until(lambda e: e["event_type"] == "process_ended")
    assert {e["agent_id"] for e in only_a.events} == {"aaaa"}
    assert [e["event_type"] for e in only_a.events] == ["agent_updated", "output", "process_ended"]
    assert not no_output.of_type("output") and len(no_output.events) == 3
    assert [e["payload"]["text"] for e in output_of_b.of_type("output")] == ["from b"]
    assert len(output_of_b.of_type("agent_updated")) == 2, "other events are not filtered by output_agent_ids"


async def test_last_event_id_resumes_or_starts_with_a_gap(store: HistoryStore) -> None:
    hub = EventHub()
    async with serving(store, hub) as url:
        for n in range(5):
            hub.publish("agent_updated", {"n": n}, agent_id="aaaa")
        async with sse(url, BEARER, headers={"Last-Event-ID": "2"}) as stream:
            got = [await stream.until(lambda e: True) for _ in range(3)]
        assert [e["sequence"] for e in got] == [3, 4, 5]
        hub.skip()  # output nobody watched: the ring cannot bridge it
        hub.publish("agent_updated", {"n": 6}, agent_id="aaaa")
        async with sse(url, BEARER, headers={"Last-Event-ID": "5"}) as stream:
            gap = await stream.until(lambda e: True)
            after = await stream.until(lambda e: True)
        assert gap["event_type"] == "gap" and gap["payload"]["first_missed_sequence"] == 6
        assert "recovery_since_ms" in gap["payload"]
        assert after["sequence"] == 7


@pytest.mark.parametrize("published", [0, 3])
async def test_a_last_event_id_from_before_a_restart_starts_with_a_gap(
    store: HistoryStore, published: int
) -> None:
    hub = EventHub()  # a new runtime's hub: its numbers start again from 1
    async with serving(store, hub) as url:
        for n in range(published):
            hub.publish("agent_updated", {"n": n}, agent_id="aaaa")
        async with sse(url, BEARER, headers={"Last-Event-ID": "50"}) as stream:
            gap = await stream.until(lambda e: True)
            hub.publish("agent_updated", {"n": "new"}, agent_id="aaaa")
            after = await stream.until(lambda e: True)
        assert gap["event_type"] == "gap"
        assert gap["payload"]["first_missed_sequence"] == 1, "everything this runtime published was missed"
        assert gap["payload"]["recovery_since_ms"] == 0, "since when is unknown: recover everything"
        assert after["sequence"] == published + 1 and after["payload"] == {"n": "new"}


async def test_bad_event_parameters_are_400(store: HistoryStore) -> None:
    hub = EventHub()
    async with serving(store, hub) as url, httpx2.AsyncClient() as client:
        auth = {"Authorization": f"Bearer {BEARER}"}
        bad = await client.get(f"{url}/v1/events?include_output=maybe", headers=auth)
        assert bad.status_code == 400 and "include_output" in bad.json()["error"]
        bad = await client.get(f"{url}/v1/events", headers={**auth, "Last-Event-ID": "x"})
        assert bad.status_code == 400 and bad.json()["schema_version"] == 1
        anonymous = await client.get(f"{url}/v1/events")
        assert anonymous.status_code == 401
    assert not hub.has_subscribers


async def test_a_slow_subscriber_gets_a_gap_and_never_stalls_a_fast_one(store: HistoryStore) -> None:
    hub = EventHub()
    total = SUBSCRIBER_QUEUE * 4
    async with serving(store, hub) as url, sse(url, BEARER) as fast:
        host, port = url.removeprefix("http://").split(":")
        # The slow viewer subscribes and then reads nothing: its socket buffers fill.
        slow = socket.create_connection((host, int(port)))
        slow.sendall(
            f"GET /v1/events HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {BEARER}\r\n\r\n".encode()
        )
        await wait_subscribed(hub, 2)
        reading = asyncio.create_task(read_all(fast, total))
        padding = "x" * 8000  # far more than the socket buffers between us hold
        for n in range(total):
            publish_output(hub, "aaaa", f"{n} {padding}")
            while len(fast.events) < n - SUBSCRIBER_QUEUE // 2:
                await asyncio.sleep(0.001)  # a viewer that keeps up, as a live board does
        got = await asyncio.wait_for(reading, scaled(30))
        assert [e["sequence"] for e in got] == list(range(1, total + 1)), (
            "the fast viewer got every event, in order"
        )
        assert not [e for e in got if e["event_type"] == "gap"]
        slow.setblocking(False)
        received = await drain_socket(slow, b'"event_type":"gap"')
        slow.close()
    assert b'"event_type":"gap"' in received, "the slow viewer was told it missed events"


async def read_all(stream: SseStream, count: int) -> list[dict[str, Any]]:
    while len(stream.events) < count:
        if await stream.next_frame() is None:
            break
    return stream.events


async def drain_socket(sock: socket.socket, wanted: bytes) -> bytes:
    loop = asyncio.get_running_loop()
    received = b""
    while wanted not in received:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), scaled(10))
        if not chunk:
            break
        received += chunk
    return received


async def wait_subscribed(hub: EventHub, count: int = 1) -> None:
    await wait_for(lambda: len(hub._subscribers) >= count, what=f"{count} subscriber(s)")


def test_hub_queue_overflow_is_one_gap_then_new_events() -> None:
    hub = EventHub()
    stalled = hub.subscribe(EventFilter())
    for n in range(SUBSCRIBER_QUEUE + 10):
        hub.publish("agent_updated", {"n": n}, agent_id="aaaa")
    events = asyncio.run(stalled.next_events(0.01))
    assert events is not None
    assert [e.event_type for e in events] == ["gap"] + ["agent_updated"] * 10, "the unread queue was dropped"
    assert events[0].payload["first_missed_sequence"] == 1
    assert events[1].sequence == SUBSCRIBER_QUEUE + 1
    hub.publish("agent_updated", {"n": "later"}, agent_id="aaaa")
    later = asyncio.run(stalled.next_events(0.01))
    assert later is not None and [e.payload["n"] for e in later] == ["later"]


def test_the_hub_is_quiet_only_when_another_skip_would_change_nothing() -> None:
    hub = EventHub()
    assert hub.quiet, "nothing published and nobody watching"
    viewer = hub.subscribe(EventFilter())
    assert not hub.quiet, "a viewer is watching"
    hub.publish("agent_updated", {"n": 1}, agent_id="aaaa")
    hub.unsubscribe(viewer)
    assert not hub.quiet, "the ring would bridge a resume from event 1: a skip must be taken"
    hub.skip()
    assert hub.quiet
    resumed = hub.subscribe(EventFilter(), after=1)
    events = asyncio.run(resumed.next_events(0.01))
    assert events is not None and [e.event_type for e in events] == ["gap"], "a resume still gets its gap"


def test_unknown_event_types_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        EventHub().publish("made_up", {})


# -- the one write route: an agent's alias ----------------------------------------------------


def test_alias_put_sets_the_alias_and_tells_the_listener(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    heard: list[Any] = []
    with HistoryStore(tmp_path / "h") as store:
        agent = store.agent_for("conversation-key-" + "k" * 20).agent_id
        app = create_observer_app(
            store, runtime_id=RUNTIME_ID, bearer_token=BEARER, started_at=T0, on_alias=heard.append
        )
        with TestClient(app, base_url=BASE_URL) as client:
            auth = {"Authorization": f"Bearer {BEARER}"}
            ok = client.put(f"/v1/agents/{agent}/alias", json={"alias": "  Fix the parser  "}, headers=auth)
            assert ok.status_code == 200 and ok.json()["alias"] == "Fix the parser"
            assert ok.headers["cache-control"] == "no-store"
            assert [a.alias for a in heard] == ["Fix the parser"]
            for body, status, words in [
                ({"alias": "bad\x07bell"}, 400, "control"),
                ({"alias": "x" * 81}, 400, "80"),
                ({"name": "x"}, 400, "alias"),
                ([1], 400, "alias"),
            ]:
                reply = client.put(f"/v1/agents/{agent}/alias", json=body, headers=auth)
                assert reply.status_code == status and words in reply.json()["error"], reply.text
            not_json = client.put(f"/v1/agents/{agent}/alias", content=b"{nope", headers=auth)
            assert not_json.status_code == 400
            huge = client.put(f"/v1/agents/{agent}/alias", content=b"x" * 5000, headers=auth)
            assert huge.status_code == 413
            assert client.put("/v1/agents/zzzz/alias", json={"alias": "a"}, headers=auth).status_code == 404
            assert client.put(f"/v1/agents/{agent}/alias", json={"alias": "a"}).status_code == 401
            assert (
                client.post(f"/v1/agents/{agent}/alias", json={"alias": "a"}, headers=auth).status_code == 405
            )
            assert client.put(f"/v1/agents/{agent}", json={"alias": "a"}, headers=auth).status_code == 405
            assert client.get(f"/v1/agents/{agent}", headers=auth).json()["alias"] == "Fix the parser"
            cleared = client.put(f"/v1/agents/{agent}/alias", json={"alias": ""}, headers=auth)
            assert cleared.json()["alias"] is None
        assert len(heard) == 2, "refused edits changed nothing and told no one"


def test_a_rotated_bearer_file_takes_effect_at_once(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from zodex_gateway.local.bearer import rotate_bearer
    from zodex_gateway.observer import file_bearer

    path = tmp_path / "observer-bearer"
    old = rotate_bearer(path)
    assert len(old) >= 32 and path.stat().st_mode & 0o777 == 0o600
    with HistoryStore(tmp_path / "h") as store:
        app = create_observer_app(store, runtime_id=RUNTIME_ID, bearer_token=file_bearer(path), started_at=T0)
        with TestClient(app, base_url=BASE_URL) as client:
            assert client.get("/v1/status", headers={"Authorization": f"Bearer {old}"}).status_code == 200
            new = rotate_bearer(path)
            assert new != old
            assert client.get("/v1/status", headers={"Authorization": f"Bearer {old}"}).status_code == 401
            assert client.get("/v1/status", headers={"Authorization": f"Bearer {new}"}).status_code == 200
            path.unlink()
            assert client.get("/v1/status", headers={"Authorization": f"Bearer {new}"}).status_code == 401
            assert client.get("/v1/status", headers={"Authorization": "Bearer "}).status_code == 401


def test_a_flood_of_output_with_a_viewer_holds_a_bounded_amount_of_memory() -> None:
    hub = EventHub()
    viewer = hub.subscribe(EventFilter())  # subscribed, reading nothing
    piece = 256 * 1024
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):  # 50 MiB of output, as the capture's batches bring it
            text = f"{n:08d}" + "x" * (piece - 8)
            hub.publish("output", {"session_handle": "h", "seq": n, "text": text, "display_text": text[::-1]})
            del text
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert hub.ring_bytes <= RING_BYTES and viewer.queued_bytes <= SUBSCRIBER_QUEUE_BYTES
    # What the ring and the queue hold (the same events, frames and payloads), with room.
    assert held <= 3 * max(RING_BYTES, SUBSCRIBER_QUEUE_BYTES), f"{held / 2**20:.0f} MiB held"
    events = asyncio.run(viewer.next_events(0.01))
    assert events is not None and events[0].event_type == "gap"
    assert [e.sequence for e in events[1:]] == list(range(events[1].sequence, 201)), (
        "the newest events, in order"
    )
    assert len(events) - 1 < 200
