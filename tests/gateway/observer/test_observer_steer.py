"""The observer's steer routes (docs/observer.md#a-person-types-into-a-session) in process:
the steer token and only it, bodies checked before anything is sent, the input recorded
`by: person` in the session creator's column — hidden input as a count only — and the
viewers told. The workers are a stand-in here; tests/worker and the Liveboard tests use
real ones."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from starlette.testclient import TestClient

from tests.gateway.observer.observer_support import BASE_URL, BEARER, RUNTIME_ID, T0, Seeded
from zodex_gateway.history import HistoryStore
from zodex_gateway.observer import Steering, create_observer_app
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.limits import Limits
from zodex_protocol.replies import HumanInput, PersonTyped
from zodex_protocol.requests import PersonInputRequest, TakeOverRequest

STEER = "steer-token-" + "s" * 40
SECRET = "hunter2-but-longer"


@dataclass
class Workers:
    """Answers as a worker would; ``hidden`` is the terminal's echo state."""

    hidden: bool = False
    typed: list[PersonInputRequest] = field(default_factory=list)
    taken: list[TakeOverRequest] = field(default_factory=list)
    refuse: ProtocolError | None = None

    async def type_in(self, request: PersonInputRequest) -> PersonTyped:
        if self.refuse is not None:
            raise self.refuse
        self.typed.append(request)
        text = None if self.hidden else request.chars
        return PersonTyped(
            request.session_handle,
            HumanInput("2026-01-01T00:00:00.000Z", text, self.hidden),
            len(request.chars),
        )

    async def take_over(self, request: TakeOverRequest) -> bool:
        self.taken.append(request)
        return request.taken


@dataclass
class Heard:
    started: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)

    def call_started(self, invocation_id: str) -> None:
        self.started.append(invocation_id)

    def call_completed(self, invocation_id: str) -> None:
        self.completed.append(invocation_id)


@pytest.fixture
def workers() -> Workers:
    return Workers()


@pytest.fixture
def heard() -> Heard:
    return Heard()


@pytest.fixture
def steered(store: HistoryStore, seeded: Seeded, workers: Workers, heard: Heard) -> Iterator[TestClient]:
    steering = Steering(lambda: STEER, workers, Limits(max_chars_chars=64))
    app = create_observer_app(
        store, runtime_id=RUNTIME_ID, bearer_token=BEARER, started_at=T0, steering=steering, watchers=[heard]
    )
    with TestClient(app, base_url=BASE_URL) as client:
        yield client


def test_visible_input_is_recorded_by_a_person_in_the_creators_column(
    steered: TestClient, store: HistoryStore, seeded: Seeded, workers: Workers, heard: Heard
) -> None:
    reply = steered.post(
        "/v1/sessions/h-run/input", json={"chars": "yes\r"}, headers={"Authorization": f"Bearer {STEER}"}
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body == {
        "schema_version": 1,
        "session_handle": "h-run",
        "at": "2026-01-01T00:00:00.000Z",
        "chars": 4,
        "hidden": False,
        "recorded": True,
        "history_error": None,
    }
    assert workers.typed == [PersonInputRequest("h-run", "yes\r")]
    (row,) = [inv for inv in store.invocations() if inv.by == "person"]
    assert (row.agent_id, row.tool_name, row.args) == (
        seeded.agent_a,
        "write_stdin",
        {"session_handle": "h-run", "chars": "yes\r"},
    )
    assert row.real_workdir == "/work/project" and not row.cross_agent
    assert isinstance(row.result, dict)
    assert row.result["human_input"] == {"at": "2026-01-01T00:00:00.000Z", "text": "yes\r", "hidden": False}
    assert heard.started == heard.completed == [row.id]
    assert steered.get("/v1/status", headers={"Authorization": f"Bearer {BEARER}"}).json()["steer"] is True


def test_hidden_input_is_recorded_as_a_count_only(
    steered: TestClient, store: HistoryStore, workers: Workers
) -> None:
    workers.hidden = True
    reply = steered.post(
        "/v1/sessions/h-run/input",
        json={"chars": SECRET + "\r"},
        headers={"Authorization": f"Bearer {STEER}"},
    )
    assert reply.status_code == 200 and reply.json()["hidden"] is True and SECRET not in reply.text
    (row,) = [inv for inv in store.invocations() if inv.by == "person"]
    assert row.args["chars"] == "[a person typed 19 hidden characters]"
    assert row.result == {
        "summary": "[a person typed 19 hidden characters]",
        "human_input": {"at": "2026-01-01T00:00:00.000Z", "text": None, "hidden": True},
    }
    timeline = steered.get("/v1/timeline", headers={"Authorization": f"Bearer {BEARER}"})
    assert SECRET not in timeline.text
    stdin = [r for r in timeline.json()["records"] if r["by"] == "person"]
    assert [r["chars"] for r in stdin] == ["[a person typed 19 hidden characters]"]


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": f"Bearer {BEARER}"}, {"Authorization": "Bearer forged"}, {}],
    ids=["the-read-bearer", "forged", "none"],
)
def test_only_the_steer_token_opens_the_route(
    steered: TestClient, workers: Workers, headers: dict[str, str]
) -> None:
    for path, body in (("input", {"chars": "x"}), ("takeover", {"taken": True})):
        reply = steered.post(f"/v1/sessions/h-run/{path}", json=body, headers=headers)
        assert reply.status_code == 401, reply.text
    assert workers.typed == [] and workers.taken == []
    # And the steer token reads nothing.
    assert steered.get("/v1/status", headers={"Authorization": f"Bearer {STEER}"}).status_code == 401


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b'{"chars": ""}', "application/json", 400),
        (b'{"chars": 5}', "application/json", 400),
        (b'{"chars": "x", "and": 1}', "application/json", 400),
        (b"not json", "application/json", 400),
        (b'{"chars": "' + b"x" * 65 + b'"}', "application/json", 400),
        (b'{"chars": "' + b"x" * 700 + b'"}', "application/json", 413),
        (b"chars=x", "application/x-www-form-urlencoded", 415),
    ],
)
def test_a_bad_body_is_refused_and_sends_nothing(
    steered: TestClient, store: HistoryStore, workers: Workers, content: bytes, content_type: str, status: int
) -> None:
    reply = steered.post(
        "/v1/sessions/h-run/input",
        content=content,
        headers={"Authorization": f"Bearer {STEER}", "Content-Type": content_type},
    )
    assert reply.status_code == status, reply.text
    assert workers.typed == [] and not [inv for inv in store.invocations() if inv.by == "person"]


@pytest.mark.parametrize(
    ("code", "status"),
    [(ErrorCode.UNKNOWN_HANDLE, 404), (ErrorCode.INVALID_ARGUMENT, 409), (ErrorCode.STOPPING, 503)],
)
def test_a_worker_refusal_is_told_and_nothing_is_recorded(
    steered: TestClient, store: HistoryStore, workers: Workers, code: ErrorCode, status: int
) -> None:
    workers.refuse = ProtocolError(code, "the worker said no")
    reply = steered.post(
        "/v1/sessions/h-run/input", json={"chars": "x"}, headers={"Authorization": f"Bearer {STEER}"}
    )
    assert (reply.status_code, reply.json()["error"]) == (status, "the worker said no")
    assert not [inv for inv in store.invocations() if inv.by == "person"]


def test_take_over_and_give_back(steered: TestClient, workers: Workers) -> None:
    auth = {"Authorization": f"Bearer {STEER}"}
    taken = steered.post("/v1/sessions/h-run/takeover", json={"taken": True}, headers=auth)
    assert taken.json() == {"schema_version": 1, "session_handle": "h-run", "taken_over": True}
    back = steered.post("/v1/sessions/h-run/takeover", json={"taken": False}, headers=auth)
    assert back.json()["taken_over"] is False
    assert steered.post("/v1/sessions/h-run/takeover", json={"taken": "yes"}, headers=auth).status_code == 400
    assert [r.taken for r in workers.taken] == [True, False]


def test_without_steering_the_route_refuses(client: TestClient) -> None:
    reply = client.post("/v1/sessions/h-run/input", json={"chars": "x"})
    assert (reply.status_code, reply.json()["error"]) == (
        403,
        "typing into sessions is off; set observer.steer = true and restart Zodex Local",
    )
    assert client.get("/v1/status").json()["steer"] is False
