"""The front door every listener shares (zodex_gateway.web.guard): Host before anything,
the listener's admission rule, one JSON error shape, headers on every answer, and a failure
before the response started turned into a JSON 500 (docs/observer.md#common-rules)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.responses import PlainTextResponse, Response
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from zodex_gateway.web.guard import JsonErrors, ListenerGuard

PORT = 8124
BASE = f"http://127.0.0.1:{PORT}"
ALWAYS = [(b"cache-control", b"no-store"), (b"x-frame-options", b"DENY")]
ERRORS = JsonErrors(schema_version=1)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":  # other scopes reach the app unchecked
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    path = scope["path"]
    if path == "/boom":
        raise RuntimeError("boom")
    if path == "/boom-late":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("boom after the headers")
    reply = PlainTextResponse(f"served {path}", headers={"Cache-Control": "max-age=60"})
    await reply(scope, receive, send)


def admit(scope: Scope) -> Scope | Response:
    if scope["path"] == "/refused":
        return ERRORS.response(403, "not you", {"X-Why": "test"})
    if scope["path"].startswith("/inner/"):
        inner = scope["path"][len("/inner") :]
        return {**scope, "path": inner, "raw_path": inner.encode()}
    return scope


def client(*, raising: bool = False, **options: Any) -> TestClient:
    guard = ListenerGuard(app, name="test", errors=ERRORS, admit=admit, **options)
    return TestClient(guard, base_url=BASE, raise_server_exceptions=raising)


def test_a_foreign_host_is_refused_before_admission_with_the_listeners_error_shape() -> None:
    with client(always=ALWAYS) as c:
        reply = c.get("/refused", headers={"Host": "evil.example"})
    assert reply.status_code == 421
    assert reply.json() == {"schema_version": 1, "error": "Host header does not name this server"}
    assert reply.headers["content-type"] == "application/json"
    assert reply.headers["cache-control"] == "no-store"


def test_extra_host_names_are_served_with_the_connections_port() -> None:
    with client(extra_hosts=("10.1.2.3", "::1")) as c:
        assert c.get("/", headers={"Host": f"10.1.2.3:{PORT}"}).text == "served /"
        assert c.get("/", headers={"Host": f"10.1.2.3:{PORT + 1}"}).status_code == 421


def test_admission_refuses_or_rewrites_the_scope() -> None:
    with client() as c:
        refused = c.get("/refused")
        assert refused.status_code == 403 and refused.json() == {"schema_version": 1, "error": "not you"}
        assert refused.headers["x-why"] == "test"
        assert c.get("/inner/x").text == "served /x"


def test_always_headers_replace_the_apps_on_every_answer() -> None:
    with client(always=ALWAYS) as c:
        for reply in (c.get("/"), c.get("/refused")):
            assert reply.headers.get_list("cache-control") == ["no-store"]
            assert reply.headers["x-frame-options"] == "DENY"


def test_without_always_headers_the_app_answers_unchanged() -> None:
    with client() as c:
        assert c.get("/").headers["cache-control"] == "max-age=60"


def test_a_failure_before_the_response_is_a_json_500_when_caught(caplog: pytest.LogCaptureFixture) -> None:
    with client(always=ALWAYS, catch_errors=True) as c:
        reply = c.get("/boom")
    assert reply.status_code == 500
    assert reply.json() == {"schema_version": 1, "error": "internal error"}
    assert reply.headers["cache-control"] == "no-store"
    assert "test request failed: /boom" in caplog.text


def test_a_failure_after_the_headers_is_not_answered_twice() -> None:
    with client(catch_errors=True, raising=True) as c, pytest.raises(RuntimeError, match="after the headers"):
        c.get("/boom-late")


def test_uncaught_failures_reach_the_server() -> None:
    with client(raising=True) as c, pytest.raises(RuntimeError, match="boom"):
        c.get("/boom")


def test_mcp_shape_has_no_schema_version() -> None:
    reply = JsonErrors().response(401, "missing or invalid token")
    assert reply.body == b'{"error":"missing or invalid token"}'


def test_refusals_are_logged_on_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="zodex.gateway")
    with client() as c:
        c.get("/refused")
        c.get("/x%0Aforged%20line", headers={"Host": "evil.example"})
        c.get("/served")
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert logged == [
        ("WARNING", 'test request refused with 403: GET "/refused"'),
        ("WARNING", 'test request refused with 421: GET "/x\\nforged line"'),
    ]
