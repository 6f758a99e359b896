"""The MCP listener's session ids as an ASGI app, no socket (docs/modes.md#mcp-endpoint): a
handshake ``initialize`` gets one, a verified one is kept, anything else is 404 before the
request is read, and the token is checked first."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.gateway.serve.test_local_front import NoDispatcher
from zodex_gateway.agents.identity import VERIFIED_SESSION_SCOPE_KEY
from zodex_gateway.agents.session_ids import SessionIds
from zodex_gateway.local.front import LocalFront
from zodex_gateway.mcp.alias_tool import NO_IDENTITY
from zodex_gateway.mcp.server import server_for
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_gateway.serve.mcp_http import UNKNOWN_SESSION, McpHttpApp

TOKEN = "s3ss10n" * 9 + "x"
PORT = 8124
GOOD = {
    "X-Zodex-Local-Token": TOKEN,
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}
INIT_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "0"},
}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT_PARAMS}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
IDS = SessionIds.ephemeral()


class Recording:
    """Local's front around the MCP app, remembering the scope of each request that reached
    the SDK's app."""

    def __init__(self) -> None:
        mcp = McpHttpApp(server_for(ToolDispatcher(NoDispatcher())), session_ids=IDS)  # type: ignore[arg-type]
        self.guarded = LocalFront(mcp, TOKEN, "127.0.0.1")
        inner = mcp._calls.serve
        self.reached: list[dict[str, Any]] = []

        async def serve(scope: Any, receive: Any, send: Any, body: bytes, session: str | None) -> None:
            self.reached.append(scope)
            await inner(scope, receive, send, body, session)

        mcp._calls.serve = serve  # type: ignore[method-assign]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.guarded(scope, receive, send)


@pytest.fixture
def app() -> Recording:
    return Recording()


@pytest.fixture
def client(app: Recording) -> Iterator[TestClient]:
    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}") as c:
        yield c


def post(client: TestClient, body: Any, **headers: str) -> Any:
    return client.post("/mcp", headers={**GOOD, **headers}, content=json.dumps(body))


def test_initialize_gets_a_signed_id_and_each_initialize_a_new_one(client: TestClient) -> None:
    first, second = post(client, INIT), post(client, INIT)
    for response in (first, second):
        assert response.status_code == 200, response.text
        assert IDS.verify(response.headers["mcp-session-id"])
    assert first.headers["mcp-session-id"] != second.headers["mcp-session-id"]


def test_initialize_with_a_verified_id_keeps_it(client: TestClient) -> None:
    issued = IDS.issue()
    response = post(client, INIT, **{"Mcp-Session-Id": issued})
    assert response.status_code == 200 and response.headers["mcp-session-id"] == issued


def test_other_requests_get_no_id(client: TestClient) -> None:
    for headers in ({}, {"Mcp-Session-Id": IDS.issue()}):
        response = post(client, LIST, **headers)
        assert response.status_code == 200 and response.json()["result"]["tools"]
        assert "mcp-session-id" not in response.headers


def test_a_per_request_revision_gets_no_id(client: TestClient) -> None:
    # 2026-07-28 has no initialize and no session: the SDK's per-request path answers it.
    response = post(client, INIT, **{"MCP-Protocol-Version": "2026-07-28"})
    assert "mcp-session-id" not in response.headers


def test_a_verified_id_reaches_the_app_in_its_scope_and_nothing_else_does(
    client: TestClient, app: Recording
) -> None:
    issued = IDS.issue()
    post(client, LIST, **{"Mcp-Session-Id": issued})
    post(client, LIST)
    assert app.reached[0][VERIFIED_SESSION_SCOPE_KEY] == issued
    assert VERIFIED_SESSION_SCOPE_KEY not in app.reached[1]


def refusals() -> dict[str, list[tuple[bytes, bytes]]]:
    issued = IDS.issue().encode()
    return {
        "forged MAC": [(b"mcp-session-id", issued[:-1] + (b"0" if issued[-1:] != b"0" else b"1"))],
        "another key's": [(b"mcp-session-id", SessionIds.ephemeral().issue().encode())],
        "malformed": [(b"mcp-session-id", b"not-a-session")],
        "empty": [(b"mcp-session-id", b"")],
        "oversized": [(b"mcp-session-id", issued + b"0" * 4000)],
        "not ASCII": [(b"mcp-session-id", issued[:-1] + b"\xe9")],
        "two, both valid": [(b"mcp-session-id", issued), (b"mcp-session-id", issued)],
    }


@pytest.mark.parametrize("case", sorted(refusals()))
@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
async def test_any_other_id_is_404_before_the_app(case: str, method: str, app: Recording) -> None:
    headers = [
        (b"host", f"127.0.0.1:{PORT}".encode()),
        (b"x-zodex-local-token", TOKEN.encode()),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
        *refusals()[case],
    ]
    status, body = await call(app, method, headers, json.dumps(INIT).encode())
    assert status == 404
    assert body == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": UNKNOWN_SESSION}}
    assert app.reached == [], "the request never reached the MCP app"


async def test_the_token_is_checked_before_the_session_id(app: Recording) -> None:
    headers = [(b"host", f"127.0.0.1:{PORT}".encode()), (b"mcp-session-id", b"forged")]
    status, body = await call(app, "POST", headers, json.dumps(INIT).encode())
    assert status == 401 and body == {"error": "missing or invalid token"}


def test_delete_with_a_verified_id_is_405(client: TestClient) -> None:
    # Nothing is kept for a session, so there is nothing to end (docs/modes.md#mcp-endpoint).
    response = client.delete("/mcp", headers={**GOOD, "Mcp-Session-Id": IDS.issue()})
    assert response.status_code == 405


async def call(
    app: Recording, method: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[int, Any]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/mcp", "raw_path": b"/mcp", "query_string": b"",
             "headers": headers, "server": ("127.0.0.1", PORT)}  # fmt: skip
    await app(scope, receive, send)
    return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


def test_the_messages_are_the_documented_ones() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs"
    assert UNKNOWN_SESSION in (docs / "agents.md").read_text()
    assert UNKNOWN_SESSION in (docs / "modes.md").read_text()
    assert NO_IDENTITY in (docs / "tools.md").read_text()
