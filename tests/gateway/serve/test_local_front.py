"""Local's front door for MCP (docs/modes.md#http-listeners) around the MCP HTTP app, as an
ASGI app, no socket: Host check, token, paths, the token file, and the body limits behind
them. Checks run in this order: Host, then path, then token."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.support.gateway import wait_for
from tests.support.handshake import ACCEPT, INIT
from zodex_gateway.local.front import MISSING_TOKEN, LocalFront, load_or_create_token
from zodex_gateway.mcp.server import server_for
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_gateway.serve.mcp_http import LARGE_BODY, McpHttpApp

TOKEN = "t0k3n" * 12 + "abcd"  # 64 characters
PORT = 8123
GOOD = {"X-Zodex-Local-Token": TOKEN}


class NoDispatcher:
    """The guard tests never reach a tool."""

    async def exec_command(self, args: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("no tool call expected")

    write_stdin = apply_patch = exec_command

    async def close(self) -> None:
        pass


def make_mcp(max_body: int | None = None) -> McpHttpApp:
    server = server_for(ToolDispatcher(NoDispatcher()))  # type: ignore[arg-type]
    return McpHttpApp(server) if max_body is None else McpHttpApp(server, max_body=max_body)


def make_app(
    host: str = "127.0.0.1", *, mcp: McpHttpApp | None = None, refusal: str = MISSING_TOKEN
) -> LocalFront:
    # The port the Host must carry is the one the connection came in on (the client's base_url).
    return LocalFront(mcp or make_mcp(), TOKEN, host, refusal=refusal)


@pytest.fixture
def client() -> Iterator[TestClient]:
    # The context manager runs the lifespan, which the MCP app needs to answer.
    with TestClient(make_app(), base_url=f"http://127.0.0.1:{PORT}") as c:
        yield c


def post(client: TestClient, headers: dict[str, str], path: str = "/mcp") -> Any:
    return client.post(path, headers={**ACCEPT, **headers}, content=json.dumps(INIT), follow_redirects=False)


def assert_refused(response: Any, status: int, message: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": message}
    assert int(response.headers["content-length"]) == len(response.content)


def assert_served(response: Any) -> None:
    assert response.status_code == 200, response.text
    assert response.json()["result"]["serverInfo"]["name"] == "zodex"


@pytest.mark.parametrize("host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}"])
def test_loopback_hosts_with_our_port_are_served(client: TestClient, host: str) -> None:
    assert_served(post(client, {**GOOD, "Host": host}))


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "127.0.0.1:1",
        f"127.0.0.1:{PORT}0",
        f"evil.example.com:{PORT}",
        f"localhost.evil.example.com:{PORT}",
        f"127.0.0.2:{PORT}",
        "",
    ],
)
def test_other_hosts_are_refused_before_anything_else(client: TestClient, host: str) -> None:
    message = "Host header does not name this server"
    assert_refused(post(client, {**GOOD, "Host": host}), 421, message)
    assert_refused(post(client, {"Host": host}, "/elsewhere"), 421, message)


async def test_missing_host_header_is_refused() -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "raw_path": b"/mcp", "query_string": b"",
             "headers": [(b"x-zodex-local-token", TOKEN.encode())]}  # fmt: skip
    await make_app()(scope, receive, send)
    assert sent[0]["status"] == 421
    assert json.loads(sent[1]["body"]) == {"error": "Host header does not name this server"}


def test_the_configured_listen_host_is_accepted_too() -> None:
    with TestClient(make_app("10.1.2.3"), base_url=f"http://10.1.2.3:{PORT}") as c:
        assert_served(post(c, GOOD))
        assert_refused(
            post(c, {**GOOD, "Host": f"10.1.2.4:{PORT}"}), 421, "Host header does not name this server"
        )


@pytest.mark.parametrize("path", ["/mcp", "/mcp/"])
@pytest.mark.parametrize(
    "headers", [GOOD, {"Authorization": f"Bearer {TOKEN}"}, {"authorization": f"bearer {TOKEN}"}]
)
def test_token_in_either_header_on_either_path(
    client: TestClient, headers: dict[str, str], path: str
) -> None:
    response = post(client, headers, path)
    assert_served(response)
    assert response.headers["mcp-session-id"].startswith("z1."), "initialize opens a session"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Zodex-Local-Token": "wrong"},
        {"X-Zodex-Local-Token": TOKEN[:-1]},
        {"X-Zodex-Local-Token": TOKEN + "x"},
        {"X-Zodex-Local-Token": TOKEN.upper()},
        {"X-Zodex-Local-Token": ""},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer nope"},
    ],
)
def test_bad_or_missing_token_is_401(client: TestClient, headers: dict[str, str]) -> None:
    response = post(client, headers)
    assert_refused(response, 401, "missing or invalid token")
    assert response.headers["www-authenticate"] == "Bearer"


def test_the_refusal_is_the_one_given() -> None:
    app = make_app(refusal="ask someone")
    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}") as client:
        assert_refused(post(client, {}), 401, "ask someone")
        probe = client.get("/.well-known/oauth-authorization-server")
        assert probe.status_code == 400
        assert probe.json() == {"error": "invalid_request", "error_description": "ask someone"}


@pytest.mark.parametrize(
    "path",
    [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server/mcp",
        "/.well-known/openid-configuration",
        "/register",
    ],
)
def test_oauth_probes_get_the_refusal_as_an_oauth_error_with_or_without_a_token(
    client: TestClient, path: str
) -> None:
    for headers in ({}, GOOD):
        for method in ("GET", "POST"):
            probe = client.request(method, path, headers=headers)
            assert probe.status_code == 400, (method, path, probe.text)
            assert probe.json() == {
                "error": "invalid_request",
                "error_description": "missing or invalid token",
            }


@pytest.mark.parametrize(
    "path", ["/", "/other", "/mcpx", "/mcp//", "/mcp/x", "/health", "/registerx", "/.well-known/x"]
)
def test_other_paths_are_404_even_without_a_token(client: TestClient, path: str) -> None:
    assert_refused(post(client, {}, path), 404, "not found; the MCP endpoint is /mcp")
    assert_refused(post(client, GOOD, path), 404, "not found; the MCP endpoint is /mcp")


def test_trailing_slash_is_served_in_place_not_redirected(client: TestClient) -> None:
    response = post(client, GOOD, "/mcp/?x=1")
    assert_served(response)
    assert "location" not in response.headers


def test_token_file_is_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "token"
    token = load_or_create_token(path)
    assert len(token) == 64 and all(c in "0123456789abcdef" for c in token)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert path.read_text() == token + "\n"
    assert load_or_create_token(path) == token
    assert load_or_create_token(tmp_path / "other") != token


def test_token_file_with_a_short_token_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  short\n")
    with pytest.raises(ValueError, match="too short"):
        load_or_create_token(path)
    path.write_text("x" * 31 + "\n")
    with pytest.raises(ValueError, match="too short"):
        load_or_create_token(path)
    path.write_text("  " + "y" * 32 + "\n")
    assert load_or_create_token(path) == "y" * 32
    assert path.read_text() == "  " + "y" * 32 + "\n", "an existing token file is never rewritten"


# -- bodies: mcp.max-body and the large-body slots (docs/modes.md#http-listeners) ------------


def test_a_body_over_max_body_is_413_with_a_json_rpc_error_naming_the_limit() -> None:
    app = make_app(mcp=make_mcp(max_body=64 * 1024))
    expected = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "request body exceeds mcp.max-body (64 KiB)"},
    }

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(65):
            yield b" " * 1024

    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}") as c:
        declared = c.post("/mcp", headers={**ACCEPT, **GOOD}, content=b" " * (64 * 1024 + 1))
        assert declared.status_code == 413 and declared.json() == expected
        streamed = c.post("/mcp", headers={**ACCEPT, **GOOD}, content=chunks())
        assert streamed.status_code == 413 and streamed.json() == expected
        padded = json.dumps(INIT).encode() + b" " * (60 * 1024)  # within the limit: served
        assert_served(c.post("/mcp", headers={**ACCEPT, **GOOD}, content=padded))


async def test_at_most_two_large_bodies_are_held_at_once() -> None:
    mcp = make_mcp()
    app = make_app(mcp=mcp)
    answer = asyncio.Event()
    handled: list[int] = []
    bodies_read: list[int] = []

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        handled.append(len((await receive())["body"]))
        await answer.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    mcp._calls._json = inner  # type: ignore[assignment]  # the SDK app behind the front, replaced
    large = LARGE_BODY + 1

    async def request(n: int) -> None:
        async def receive() -> dict[str, Any]:
            bodies_read.append(n)
            return {"type": "http.request", "body": b" " * large, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            pass

        headers = [(b"host", f"127.0.0.1:{PORT}".encode()), (b"x-zodex-local-token", TOKEN.encode()),
                   (b"content-length", str(large).encode())]  # fmt: skip
        scope = {"type": "http", "method": "POST", "path": "/mcp", "raw_path": b"/mcp", "query_string": b"",
                 "headers": headers, "server": ("127.0.0.1", PORT)}  # fmt: skip
        await app(scope, receive, send)

    tasks = [asyncio.create_task(request(n)) for n in range(3)]
    await wait_for(lambda: len(handled) == 2, what="two large bodies in the app")
    for _ in range(20):
        await asyncio.sleep(0)  # the third has every chance to be read: it must wait
    assert sorted(bodies_read) == [0, 1], "the third body is left with its client"
    answer.set()
    await asyncio.gather(*tasks)
    assert sorted(bodies_read) == [0, 1, 2] and handled == [large] * 3
