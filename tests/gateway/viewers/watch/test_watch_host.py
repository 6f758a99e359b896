"""The watch host against an in-process observer: capability URL, Host check, allowlist,
the bearer kept server-side, the alias write, and event streams passed through."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx2

from tests.gateway.observer.observer_support import BEARER, Seeded
from tests.gateway.viewers.watch.support import AccessHolder, Observer, RunningHost, running_host, sse_frames
from tests.support.waiting import wait_until
from zodex_gateway.local.lifecycle import LocalError
from zodex_gateway.local.observer_access import ObserverAccess


def origin(host: RunningHost) -> str:
    parts = urlsplit(host.url)
    return f"{parts.scheme}://{parts.netloc}"


def test_url_carries_a_long_random_secret(host: RunningHost) -> None:
    parts = urlsplit(host.url)
    assert parts.hostname == "127.0.0.1" and parts.port == host.host.port
    assert parts.path == f"/{host.host.secret}/" and len(host.host.secret) >= 32
    with running_host(lambda: ObserverAccess("http://127.0.0.1:9", "x", "r")) as other:
        assert other.host.secret != host.host.secret


def test_wrong_secret_is_a_json_404(host: RunningHost) -> None:
    secret = host.host.secret
    with httpx2.Client(base_url=origin(host), trust_env=False) as client:
        for path in (
            "/",
            f"/{secret[:-1]}/",
            f"/{secret}x/",
            f"/{secret[:-1]}/api/v1/status",
            "/favicon.ico",
        ):
            reply = client.get(path)
            assert reply.status_code == 404, path
            assert reply.json() == {"schema_version": 1, "error": "not found"}
            assert reply.headers["cache-control"] == "no-store"
        moved = client.get(f"/{secret}")
        assert moved.status_code == 308 and moved.headers["location"] == f"/{secret}/"


def test_host_header_must_be_the_bound_loopback_address(host: RunningHost) -> None:
    port = host.host.port
    with host.client() as client:
        for bad in (f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}", f"[::2]:{port}", ""):
            reply = client.get("", headers={"Host": bad})
            assert reply.status_code == 421, bad
            assert reply.json()["schema_version"] == 1
        for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
            assert client.get("", headers={"Host": good}).status_code == 200, good


def test_serves_liveboard(host: RunningHost) -> None:
    with host.client() as client:
        index = client.get("")
        assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
        assert 'src="./static/app.js"' in index.text
        policy = index.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert index.headers["referrer-policy"] == "no-referrer"
        script = client.get("static/app.js")
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        assert client.get("static/style.css").headers["content-type"].startswith("text/css")
        for missing in ("static/nope.js", "static/.hidden.js", "static/app.py", "static/%2e%2e/__init__.py"):
            assert client.get(missing).status_code == 404, missing


def test_read_routes_are_proxied(host: RunningHost, observer: Observer, seeded: Seeded) -> None:
    direct = httpx2.Client(
        base_url=observer.served.base_url, headers={"Authorization": f"Bearer {BEARER}"}, trust_env=False
    )
    routes = [
        "status",
        "agents",
        f"agents/{seeded.agent_a}",
        "timeline?limit=2",
        f"timeline?agent_id={seeded.agent_b}",
        f"timeline/{seeded.patch_id}",
        "invocations?limit=1",
        f"invocations/{seeded.exec_done}",
        f"invocations/{seeded.exec_done}/output?view=display",
    ]
    with host.client() as client, direct:
        for route in routes:
            via = client.get(f"api/v1/{route}")
            assert via.status_code == 200, (route, via.text)
            assert via.json() == direct.get(f"/v1/{route}").json(), route
            assert via.headers["cache-control"] == "no-store"
            assert via.headers["content-type"].startswith("application/json")
        page = client.get("api/v1/timeline", params={"limit": 1}).json()
        following = client.get("api/v1/timeline", params={"limit": 1, "cursor": page["next_cursor"]}).json()
        assert following["records"][0]["presentation_id"] != page["records"][0]["presentation_id"]
        assert client.get("api/v1/timeline", params={"limit": 0}).status_code == 400, "errors pass through"
        assert client.get("api/v1/agents/zzzz").status_code == 404


def test_anything_else_is_a_404(host: RunningHost, seeded: Seeded) -> None:
    with host.client() as client:
        for path in (
            "api/v1/",
            "api/v2/status",
            "api/v1/status/extra",
            f"api/v1/agents/{seeded.agent_a}/alias",
            f"api/v1/invocations/{seeded.exec_done}/args",
            "api/v1/agents/..",
            "api/v1/mcp",
            "api",
            "v1/status",
        ):
            reply = client.get(path)
            assert reply.status_code == 404, path
            assert reply.json() == {"schema_version": 1, "error": "not found"}
        for method, path in (
            ("POST", "api/v1/status"),
            ("DELETE", f"api/v1/agents/{seeded.agent_a}"),
            ("PUT", f"api/v1/agents/{seeded.agent_a}"),
            ("POST", f"api/v1/agents/{seeded.agent_a}/alias"),
            ("OPTIONS", "api/v1/status"),
            ("OPTIONS", f"api/v1/agents/{seeded.agent_a}/alias"),
            ("HEAD", "api/v1/events"),
            ("HEAD", ""),
            ("POST", ""),
        ):
            assert client.request(method, path).status_code == 404, (method, path)


def test_alias_is_the_one_write(host: RunningHost, seeded: Seeded) -> None:
    with host.client() as client:
        route = f"api/v1/agents/{seeded.agent_b}/alias"
        done = client.put(route, json={"alias": "  Docs pass  "})
        assert done.status_code == 200, done.text
        assert done.json()["alias"] == "Docs pass" and done.headers["cache-control"] == "no-store"
        agents = {a["agent_id"]: a for a in client.get("api/v1/agents").json()["agents"]}
        assert agents[seeded.agent_b]["alias"] == "Docs pass"
        refused = client.put(route, json={"alias": "bad\u0007bell"})
        assert refused.status_code == 400 and "control" in refused.json()["error"]
        assert client.put(route, content=b'{"alias": "x"}').status_code == 415
        assert client.put(route, json={"alias": "x" * 5000}).status_code == 413
        assert client.put("api/v1/agents/zzzz/alias", json={"alias": "x"}).status_code == 404
        foreign = client.put(route, json={"alias": "x"}, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        own = client.put(route, json={"alias": "mine"}, headers={"Origin": origin(host)})
        assert own.status_code == 200 and own.json()["alias"] == "mine"
        assert client.put(route, json={"alias": ""}).json()["alias"] in ("", None)


def test_bearer_never_reaches_the_browser(host: RunningHost, observer: Observer, seeded: Seeded) -> None:
    seen: list[tuple[httpx2.Headers, str]] = []
    with host.client() as client:
        for path in (
            "",
            "static/app.js",
            "api/v1/status",
            "api/v1/agents",
            "api/v1/timeline",
            f"api/v1/invocations/{seeded.exec_running}",
            f"api/v1/invocations/{seeded.exec_running}/output",
            "api/v1/nope",
            "api/v1/timeline?limit=0",
        ):
            reply = client.get(path, headers={"Origin": "http://evil.example", "Cookie": "a=b"})
            seen.append((reply.headers, reply.text))
        reply = client.put(f"api/v1/agents/{seeded.agent_a}/alias", json={"alias": "x"})
        seen.append((reply.headers, reply.text))
        with client.stream("GET", "api/v1/events") as events:
            seen.append((events.headers, next(events.iter_lines())))
    observer.bearer[0] = "rotated-" + "z" * 56
    with host.client() as client:
        reply = client.get("api/v1/status")
        assert reply.status_code == 502
        seen.append((reply.headers, reply.text))
    for headers, text in seen:
        assert BEARER not in text
        for name, value in headers.items():
            assert BEARER not in value and "bearer" not in value.lower(), (name, value)
            assert not name.lower().startswith("access-control-"), name
            assert name.lower() not in ("set-cookie", "www-authenticate", "authorization"), name


def test_a_rotated_bearer_is_read_again(host: RunningHost, observer: Observer, source: AccessHolder) -> None:
    with host.client() as client:
        assert client.get("api/v1/status").status_code == 200
        reads = source.reads
        observer.bearer[0] = "rotated-" + "r" * 56
        source.access = observer.access()
        assert client.get("api/v1/status").status_code == 200
        assert source.reads == reads + 1
        # A bearer the observer still refuses after a fresh read is the viewer's problem, not the page's.
        observer.bearer[0] = "rotated-again-" + "q" * 50
        refused = client.get("api/v1/status")
        assert refused.status_code == 502 and "bearer" in refused.json()["error"]


def test_local_gone_is_a_clear_error(host: RunningHost, observer: Observer, source: AccessHolder) -> None:
    with host.client() as client:
        assert client.get("api/v1/status").status_code == 200
        observer.served.stop()
        unreachable = client.get("api/v1/agents")
        assert unreachable.status_code == 502 and "not reachable" in unreachable.json()["error"]
        source.error = LocalError("Zodex Local is not running; start it with `zodex local start`")
        stopped = client.get("api/v1/status")
        assert stopped.status_code == 503 and "not running" in stopped.json()["error"]
        events = client.get("api/v1/events")
        assert events.status_code == 503


def test_events_stream_through_and_resume(host: RunningHost, observer: Observer, seeded: Seeded) -> None:
    agent = {"agent_id": seeded.agent_a, "alias": "live"}
    with host.client() as client, client.stream("GET", "api/v1/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["cache-control"] == "no-store"
        lines = stream.iter_lines()
        assert next(lines).startswith(":"), "the observer's greeting comes through at once"
        wait_until(lambda: observer.hub.has_subscribers, what="the observer to have a subscriber")
        observer.publish("agent_updated", agent, agent_id=seeded.agent_a)
        observer.publish("agent_updated", {**agent, "alias": "second"}, agent_id=seeded.agent_a)
        frames = sse_frames(lines)
        first = next(frames)
        data = json.loads(first["data"])
        assert data["event_type"] == "agent_updated" and data["payload"] == agent
        assert first["id"] == str(data["sequence"])
        assert json.loads(next(frames)["data"])["payload"]["alias"] == "second"
    # The browser went away: the host must drop its upstream subscription too.
    wait_until(lambda: not observer.hub.has_subscribers, what="the upstream stream to close")
    with (
        host.client() as client,
        client.stream("GET", "api/v1/events", headers={"Last-Event-ID": first["id"]}) as resumed,
    ):
        replayed = next(sse_frames(resumed.iter_lines()))
        assert json.loads(replayed["data"])["payload"]["alias"] == "second"
        assert int(replayed["id"]) == int(first["id"]) + 1
    with host.client() as client:
        bad = client.get("api/v1/events", headers={"Last-Event-ID": "nonsense"})
        assert bad.status_code == 400 and bad.json()["schema_version"] == 1
        filtered = client.get("api/v1/events", params={"include_output": "maybe"})
        assert filtered.status_code == 400, "query strings reach the observer"


def test_stopping_the_host_ends_open_streams(source: AccessHolder, observer: Observer) -> None:
    with (
        running_host(source) as host,
        host.client() as client,
        client.stream("GET", "api/v1/events") as stream,
    ):
        lines = stream.iter_lines()
        assert next(lines).startswith(":")
        host.stop()
        try:
            rest = list(lines)
        except httpx2.RemoteProtocolError:
            rest = []
        assert all(line.startswith(":") or not line for line in rest)
    wait_until(lambda: not observer.hub.has_subscribers, what="the upstream stream to close")
