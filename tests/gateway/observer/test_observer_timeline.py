"""Presentation records, and that no secret ever leaves the API."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from tests.gateway.observer.observer_support import BEARER, IDENTITY_KEY_A, IDENTITY_KEY_B, Seeded
from zodex_gateway.history import HistoryStore


def _records(client: TestClient, **params: str) -> list[dict[str, Any]]:
    body = client.get("/v1/timeline", params=params).json()
    assert body["next_cursor"] is None
    return list(body["records"])


def test_polls_fold_into_their_command(client: TestClient, seeded: Seeded) -> None:
    records = _records(client)
    ids = [r["presentation_id"] for r in records]
    assert not set(seeded.poll_ids) & set(ids)
    command = next(r for r in records if r["presentation_id"] == seeded.exec_running)
    assert command["kind"] == "command" and command["agent_id"] == seeded.agent_a
    assert command["command"] == "make test" and command["cwd"] == "/work/project"
    assert command["status"] == "running" and command["exit_code"] is None
    assert command["poll_count"] == 2
    assert command["duration_ms"] == 5000  # the latest report on the session (the stdin write)
    assert command["output_tail"] == "ok line 1\nline 2\n"
    assert command["updated_at"] > command["started_at"]
    assert set(seeded.poll_ids) <= set(command["invocation_ids"])


def test_record_kinds(client: TestClient, seeded: Seeded) -> None:
    by_id = {r["presentation_id"]: r for r in _records(client)}
    assert [r["kind"] for r in by_id.values()] == [
        "kill",
        "generic",
        "file_changes",
        "stdin",
        "command",
        "command",
    ]
    done = by_id[seeded.exec_done]
    assert (done["status"], done["exit_code"], done["termination_reason"]) == ("exited", 0, "exit")
    assert done["duration_ms"] == 40 and done["poll_count"] == 0
    stdin = by_id[seeded.stdin_id]
    assert (stdin["chars"], stdin["session_handle"]) == ("y\n", "h-run")
    assert by_id[seeded.kill_id]["session_handle"] == "h-done"
    failed = by_id[seeded.failed_id]
    assert (failed["tool_name"], failed["status"], failed["error"]) == (
        "exec_command",
        "error",
        "workdir /nope does not exist",
    )
    files = by_id[seeded.patch_id]["files"]
    assert [(f["operation"], f["path"], f["old_path"]) for f in files] == [
        ("created", "new.txt", None),
        ("edited", "app.py", None),
        ("deleted", "old.txt", None),
        ("renamed", "moved.py", "orig.py"),
    ]
    assert files[1]["diff"] == ["@@ -1 +1 @@", "-x = 1", "+x = 2"]
    assert (files[1]["added"], files[1]["removed"]) == (1, 1)


def test_diffs_summary_omits_rows(client: TestClient, seeded: Seeded) -> None:
    record = client.get(f"/v1/timeline/{seeded.patch_id}", params={"diffs": "summary"}).json()
    assert record["files"] and all("diff" not in f for f in record["files"])
    assert client.get("/v1/timeline", params={"diffs": "bogus"}).status_code == 400


def test_one_record_and_404(client: TestClient, seeded: Seeded) -> None:
    record = client.get(f"/v1/timeline/{seeded.exec_running}").json()
    assert record["kind"] == "command" and record["poll_count"] == 2
    assert client.get(f"/v1/timeline/{seeded.poll_ids[0]}").status_code == 404


def test_timeline_filters_and_paging(client: TestClient, seeded: Seeded) -> None:
    assert [r["presentation_id"] for r in _records(client, agent_id=seeded.agent_b)] == [seeded.failed_id]
    other = _records(client, workdir="/work/other")
    assert [r["presentation_id"] for r in other] == [seeded.kill_id, seeded.exec_done]
    everything = [r["presentation_id"] for r in _records(client)]
    walked, cursor = [], None
    while True:
        body = client.get("/v1/timeline", params={"limit": "4", **({"cursor": cursor} if cursor else {})})
        walked += [r["presentation_id"] for r in body.json()["records"]]
        cursor = body.json()["next_cursor"]
        if cursor is None:
            break
    assert walked == everything
    cut = client.get(f"/v1/timeline/{seeded.patch_id}").json()["started_at_ms"]
    older = [r["presentation_id"] for r in _records(client, before_ms=str(cut))]
    assert older == everything[everything.index(seeded.patch_id) + 1 :]
    assert client.get("/v1/timeline", params={"limit": "101"}).status_code == 400
    assert client.get("/v1/timeline", params={"cursor": "!!"}).status_code == 400


def test_no_secret_in_any_response(client: TestClient, seeded: Seeded, store: HistoryStore) -> None:
    paths = [
        "/v1/status",
        "/v1/agents",
        f"/v1/agents/{seeded.agent_a}",
        "/v1/invocations",
        "/v1/timeline",
        "/v1/nowhere",
    ]
    paths += [f"/v1/invocations/{inv.id}" for inv in store.invocations()]
    paths += [f"/v1/timeline/{inv.id}" for inv in store.invocations()]
    paths += [f"/v1/invocations/{seeded.exec_running}/output"]
    for path in paths:
        response = client.get(path)
        blob = response.text + repr(response.headers)
        for secret in (BEARER, IDENTITY_KEY_A, IDENTITY_KEY_B, "mcp-session-token"):
            assert secret not in blob, (path, secret)
    unauthorized = client.get("/v1/status", headers={"Authorization": "Bearer wrong"})
    assert BEARER not in unauthorized.text + repr(unauthorized.headers)
