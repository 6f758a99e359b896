"""Invocation lists with cursors and filters, one invocation, and session output."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.gateway.observer.observer_support import Clock, Seeded, call
from zodex_gateway.history import HistoryStore


def _walk(client: TestClient, limit: int, **params: str) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    for _ in range(100):
        query = {"limit": str(limit), **params, **({"cursor": cursor} if cursor else {})}
        body = client.get("/v1/invocations", params=query).json()
        assert len(body["invocations"]) <= limit
        ids += [inv["id"] for inv in body["invocations"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return ids
    raise AssertionError("pagination did not end")


def test_pages_cover_everything_once_newest_first(
    client: TestClient, store: HistoryStore, clock: Clock
) -> None:
    for i in range(23):
        call(store, clock, agent_id=None, tool="exec_command", args={"cmd": f"echo {i}"}, workdir="/w")
    everything = [inv.id for inv in reversed(store.invocations())]
    for limit in (1, 5, 23, 100):
        assert _walk(client, limit) == everything


def test_equal_start_times_still_page_without_gaps(client: TestClient, store: HistoryStore) -> None:
    for i in range(7):
        store.complete(
            store.begin(
                agent_id=None, tool_name="t", args={"i": i}, declared_workdir=None, real_workdir=None
            ),
            ok=True,
            result="",
        )
    ids = _walk(client, 2)
    assert sorted(ids) == sorted(inv.id for inv in store.invocations()) and len(set(ids)) == 7


@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten"])
def test_bad_limit_is_400(client: TestClient, limit: str) -> None:
    response = client.get("/v1/invocations", params={"limit": limit})
    assert response.status_code == 400
    assert "limit" in response.json()["error"]


@pytest.mark.parametrize("cursor", ["not-base64!!", "eyJ4IjoxfQ", "bnVsbA", "W10"])
def test_bad_cursor_is_400(client: TestClient, cursor: str) -> None:
    response = client.get("/v1/invocations", params={"cursor": cursor})
    assert response.status_code == 400
    assert response.json()["error"].startswith("cursor")


def test_filters(client: TestClient, seeded: Seeded) -> None:
    of_b = client.get("/v1/invocations", params={"agent_id": seeded.agent_b}).json()["invocations"]
    assert [inv["id"] for inv in of_b] == [seeded.failed_id]
    other = client.get("/v1/invocations", params={"workdir": "/work/other"}).json()["invocations"]
    assert [inv["id"] for inv in other] == [seeded.exec_done]
    none = client.get("/v1/invocations", params={"agent_id": seeded.agent_b, "workdir": "/work/other"})
    assert none.json() == {"schema_version": 1, "invocations": [], "next_cursor": None}


def test_invocation_detail(client: TestClient, seeded: Seeded) -> None:
    body = client.get(f"/v1/invocations/{seeded.patch_id}").json()
    assert body["tool_name"] == "apply_patch" and body["status"] == "ok"
    assert body["args"] == {"patch": "*** Begin Patch ..."}
    assert body["result"].startswith("Success.")
    assert body["duration_ms"] == 250
    assert body["files"][1]["diff"] == ["@@ -1 +1 @@", "-x = 1", "+x = 2"]
    failed = client.get(f"/v1/invocations/{seeded.failed_id}").json()
    assert (failed["status"], failed["error"]) == ("error", "workdir /nope does not exist")
    assert client.get(f"/v1/invocations/{seeded.exec_running}").json()["session_handle"] == "h-run"
    assert client.get("/v1/invocations/nope").status_code == 404


def test_output_raw_pages_by_characters(client: TestClient, seeded: Seeded, store: HistoryStore) -> None:
    raw, _ = store.output("h-run")
    url = f"/v1/invocations/{seeded.exec_running}/output"
    text, cursor = "", None
    for _ in range(100):
        body = client.get(url, params={"limit": "5", **({"cursor": cursor} if cursor else {})}).json()
        assert len(body["text"]) <= 5
        text += body["text"]
        cursor = body["next_cursor"]
        if len(text) == len(raw):
            break
    assert text == raw
    assert body["complete"] is False and cursor is not None  # still running: more may come
    assert client.get(url, params={"cursor": cursor}).json()["text"] == ""
    store.process_ended("h-run", exit_code=0, signal=None, reason="exit", ended_at=2e9)
    final = client.get(url, params={"cursor": cursor}).json()
    assert (final["text"], final["complete"], final["next_cursor"]) == ("", True, None)


def test_output_display_strips_escapes(client: TestClient, seeded: Seeded) -> None:
    body = client.get(f"/v1/invocations/{seeded.exec_running}/output", params={"view": "display"}).json()
    assert body["text"] == "ok line 1\nline 2\n"
    raw = client.get(f"/v1/invocations/{seeded.exec_running}/output").json()
    assert "\x1b[32m" in raw["text"]
    done = client.get(f"/v1/invocations/{seeded.exec_done}/output").json()
    assert (done["text"], done["complete"], done["next_cursor"]) == ("a\n", True, None)


def test_output_errors(client: TestClient, seeded: Seeded) -> None:
    assert client.get(f"/v1/invocations/{seeded.patch_id}/output").status_code == 404
    assert client.get("/v1/invocations/nope/output").status_code == 404
    url = f"/v1/invocations/{seeded.exec_running}/output"
    assert client.get(url, params={"view": "fancy"}).status_code == 400
    assert client.get(url, params={"limit": str(1024 * 1024 + 1)}).status_code == 400
    assert client.get(url, params={"cursor": "garbage!"}).status_code == 400
    raw_cursor = client.get(url, params={"limit": "2"}).json()["next_cursor"]
    assert client.get(url, params={"cursor": raw_cursor, "view": "display"}).status_code == 400
