"""Auth, headers, error shape, status and agents."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.gateway.observer.observer_support import BEARER, RUNTIME_ID, Seeded
from zodex_gateway.history import HistoryStore

ROUTES = [
    "/v1/status",
    "/v1/agents",
    "/v1/invocations",
    "/v1/timeline",
    "/v1/nowhere",
]


def _is_error(response: Any, status: int) -> None:
    assert response.status_code == status
    body = response.json()
    assert body["schema_version"] == 1
    assert isinstance(body["error"], str) and body["error"]
    assert response.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("path", ROUTES)
def test_missing_bearer_is_401_json(anonymous: TestClient, path: str) -> None:
    _is_error(anonymous.get(path), 401)


@pytest.mark.parametrize(
    "header", [f"Bearer {BEARER}x", f"Bearer {BEARER[:-1]}", BEARER, f"Basic {BEARER}", "Bearer "]
)
def test_wrong_bearer_is_401(anonymous: TestClient, header: str) -> None:
    _is_error(anonymous.get("/v1/status", headers={"Authorization": header}), 401)


def test_unknown_route_is_404_json(client: TestClient) -> None:
    _is_error(client.get("/v1/nowhere"), 404)
    _is_error(client.get("/"), 404)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])
def test_non_get_is_405(client: TestClient, method: str) -> None:
    response = client.request(method, "/v1/status")
    assert response.status_code == 405
    assert response.headers["cache-control"] == "no-store"
    if method != "HEAD":
        _is_error(response, 405)


def test_no_cors_headers_even_for_a_preflight(client: TestClient) -> None:
    cors = {"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"}
    for response in (client.options("/v1/status", headers=cors), client.get("/v1/status", headers=cors)):
        assert not [h for h in response.headers if h.lower().startswith("access-control-")]
    assert client.options("/v1/status", headers=cors).status_code == 405


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("path", ["/v1/status", "/v1/agents", "/v1/invocations", "/v1/timeline"])
def test_success_is_no_store(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"


def test_status(client: TestClient, seeded: Seeded) -> None:
    body = client.get("/v1/status").json()
    assert body == {
        "schema_version": 1,
        "api_version": 1,
        "runtime_id": RUNTIME_ID,
        "started_at": "2023-11-14T22:13:20.000Z",
        "agent_count": 2,
        "invocation_count": 8,
        "sequence": 0,
        "steer": False,
    }


def test_agents_list_and_one(client: TestClient, seeded: Seeded) -> None:
    agents = {a["agent_id"]: a for a in client.get("/v1/agents").json()["agents"]}
    assert set(agents) == {seeded.agent_a, seeded.agent_b}
    a = agents[seeded.agent_a]
    assert a["alias"] == "builder"
    assert a["workdirs"] == ["/work/project", "/work/other"]  # newest first
    assert a["active_processes"] == 1  # h-run started, not ended; h-done ended
    assert a["first_seen"].endswith("Z") and a["last_seen"] >= a["first_seen"]
    b = agents[seeded.agent_b]
    assert (b["alias"], b["workdirs"], b["active_processes"]) == (None, ["/nope"], 0)
    assert client.get(f"/v1/agents/{seeded.agent_a}").json() == a


def test_agent_404(client: TestClient, seeded: Seeded) -> None:
    _is_error(client.get("/v1/agents/zzzz"), 404)


def test_unreadable_history_is_503_json(client: TestClient, store: HistoryStore) -> None:
    store.close()
    _is_error(client.get("/v1/agents"), 503)
