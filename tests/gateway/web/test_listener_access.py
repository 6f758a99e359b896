"""One Host rule and one bearer rule for every listener (docs/modes.md#http-listeners): MCP,
the observer API and the watch host refuse the same foreign Host headers with 421, and the
observer takes the bearer scheme in any case, as MCP does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.gateway.serve.test_local_front import TOKEN, make_app
from tests.support.handshake import ACCEPT, INIT
from zodex_gateway.history import HistoryStore
from zodex_gateway.local.observer_access import ObserverAccess
from zodex_gateway.observer import create_observer_app
from zodex_gateway.viewers.watch import ObserverProxy, create_watch_app

PORT = 8123
BASE = f"http://127.0.0.1:{PORT}"
BEARER = "observer-bearer-" + "b" * 32
SECRET = "s" * 32
GOOD_HOSTS = [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}", f"LocalHost:{PORT}"]
FOREIGN_HOSTS = [
    f"evil.example:{PORT}",
    f"localhost.evil.example:{PORT}",
    f"127.0.0.2:{PORT}",
    f"127.0.0.1:{PORT + 1}",
    "127.0.0.1",
    "localhost",
    "",
]


@pytest.fixture
def observer(tmp_path: Path) -> Iterator[TestClient]:
    with HistoryStore(tmp_path / "history") as store:
        app = create_observer_app(store, runtime_id="rt", bearer_token=BEARER, started_at=0.0)
        with TestClient(app, base_url=BASE) as client:
            yield client


@pytest.fixture
def mcp() -> Iterator[TestClient]:
    with TestClient(make_app(), base_url=BASE) as client:
        yield client


@pytest.fixture
def watch() -> Iterator[TestClient]:
    proxy = ObserverProxy(lambda: ObserverAccess("http://127.0.0.1:9", BEARER, "rt"))
    app, _routes = create_watch_app(SECRET, proxy, port=PORT)
    # Not entered as a context manager: the watch app has no lifespan to run.
    client = TestClient(app, base_url=BASE)
    try:
        yield client
    finally:
        client.close()


def observer_get(client: TestClient, headers: dict[str, str]) -> Any:
    return client.get("/v1/status", headers=headers)


def mcp_post(client: TestClient, headers: dict[str, str]) -> Any:
    return client.post("/mcp", headers={**ACCEPT, **headers}, content=json.dumps(INIT))


@pytest.mark.parametrize("host", FOREIGN_HOSTS)
def test_a_foreign_host_is_421_on_every_listener_even_with_the_right_secret(
    observer: TestClient, mcp: TestClient, watch: TestClient, host: str
) -> None:
    reply = observer_get(observer, {"Host": host, "Authorization": f"Bearer {BEARER}"})
    assert reply.status_code == 421, reply.text
    assert reply.json() == {"schema_version": 1, "error": "Host header does not name this server"}
    assert reply.headers["cache-control"] == "no-store"
    assert mcp_post(mcp, {"Host": host, "X-Zodex-Local-Token": TOKEN}).status_code == 421
    assert watch.get(f"/{SECRET}/", headers={"Host": host}).status_code == 421


@pytest.mark.parametrize("host", GOOD_HOSTS)
def test_the_loopback_names_with_the_listeners_port_are_served_everywhere(
    observer: TestClient, mcp: TestClient, watch: TestClient, host: str
) -> None:
    assert observer_get(observer, {"Host": host, "Authorization": f"Bearer {BEARER}"}).status_code == 200
    assert mcp_post(mcp, {"Host": host, "X-Zodex-Local-Token": TOKEN}).status_code == 200
    assert watch.get(f"/{SECRET}/", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_case_insensitive_on_the_observer_as_on_mcp(
    observer: TestClient, mcp: TestClient, scheme: str
) -> None:
    assert observer_get(observer, {"Authorization": f"{scheme} {BEARER}"}).status_code == 200
    assert mcp_post(mcp, {"Authorization": f"{scheme} {TOKEN}"}).status_code == 200


@pytest.mark.parametrize(
    "authorization", ["", "Bearer", "Bearer ", f"Basic {BEARER}", BEARER, f"Bearer {BEARER}x", "bearer nope"]
)
def test_anything_else_is_401_on_the_observer(observer: TestClient, authorization: str) -> None:
    reply = observer_get(observer, {"Authorization": authorization})
    assert reply.status_code == 401
    assert reply.headers["www-authenticate"] == "Bearer"
