"""Streamable HTTP (docs/modes.md#transports): token, Host header, both paths, stateless JSON responses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.gateway import GatewayEnv, HttpGateway, http_client, start_http_gateway

pytestmark = pytest.mark.timeout(60)

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def gateway(genv: GatewayEnv) -> Iterator[HttpGateway]:
    gw = start_http_gateway(genv)
    try:
        yield gw
    finally:
        gw.stop()


def post(
    gw: HttpGateway, headers: dict[str, str], path: str = "/mcp", host: str | None = None
) -> httpx.Response:
    url = f"http://127.0.0.1:{gw.port}{path}"
    all_headers = {**ACCEPT, **headers}
    if host is not None:
        all_headers["Host"] = host
    return httpx.post(url, headers=all_headers, content=json.dumps(INIT), timeout=10)


def test_token_file_is_private_and_long(gateway: HttpGateway, genv: GatewayEnv) -> None:
    token_file = genv.root / "token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert len(gateway.token) == 64


def test_missing_or_bad_token_is_401(gateway: HttpGateway) -> None:
    assert post(gateway, {}).status_code == 401
    assert post(gateway, {"X-Zodex-Local-Token": "wrong"}).status_code == 401
    assert post(gateway, {"X-Zodex-Local-Token": gateway.token[:-1]}).status_code == 401
    assert post(gateway, {"Authorization": "Basic " + gateway.token}).status_code == 401
    response = post(gateway, {"Authorization": "Bearer nope"})
    assert response.status_code == 401
    assert response.json() == {"error": "missing or invalid token"}
    assert response.headers["www-authenticate"] == "Bearer"


def test_good_token_both_headers_both_paths(gateway: HttpGateway) -> None:
    for headers in ({"X-Zodex-Local-Token": gateway.token}, {"Authorization": f"Bearer {gateway.token}"}):
        for path in ("/mcp", "/mcp/"):
            response = post(gateway, headers, path)
            assert response.status_code == 200, (path, response.text)
            assert response.headers["content-type"].startswith("application/json")
            assert response.json()["result"]["serverInfo"]["name"] == "zodex"
            assert "mcp-session-id" not in response.headers, "stateless: no session is kept"


def test_foreign_host_header_is_refused(gateway: HttpGateway) -> None:
    good = {"X-Zodex-Local-Token": gateway.token}
    for host in ("evil.example.com", f"evil.example.com:{gateway.port}", "127.0.0.1:1", "localhost"):
        response = post(gateway, good, host=host)
        assert response.status_code == 421, host
    assert post(gateway, good, host=f"localhost:{gateway.port}").status_code == 200


def test_other_paths_are_404(gateway: HttpGateway) -> None:
    response = post(gateway, {"X-Zodex-Local-Token": gateway.token}, path="/other")
    assert response.status_code == 404


async def test_mcp_client_with_bad_token_fails(gateway: HttpGateway) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the SDK raises its own transport error
        async with http_client(gateway.url, {"X-Zodex-Local-Token": "bad"}) as mcp:
            await mcp.client.list_tools()


async def test_server_instructions_name_start_directory(genv: GatewayEnv, tmp_path: Path) -> None:
    gw = start_http_gateway(genv, "--start-directory", str(tmp_path))
    try:
        async with http_client(gw.url, {"X-Zodex-Local-Token": gw.token}) as mcp:
            text = mcp.client.instructions or ""
    finally:
        gw.stop()
    assert str(tmp_path) in text
    assert "none is ever substituted" in text
