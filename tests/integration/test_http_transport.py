"""Streamable HTTP (docs/modes.md#transports): token, Host header, both paths, stateless JSON responses
(session ids are signed, not remembered: docs/modes.md#mcp-endpoint)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.support.gateway import GatewayEnv, HttpGateway, http_client, start_http_gateway
from tests.support.handshake import ACCEPT, INIT

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def gateway(genv: GatewayEnv) -> Iterator[HttpGateway]:
    gw = start_http_gateway(genv)
    try:
        yield gw
    finally:
        gw.stop()


def post(
    gw: HttpGateway, headers: dict[str, str], path: str = "/mcp", host: str | None = None
) -> httpx2.Response:
    url = f"http://127.0.0.1:{gw.port}{path}"
    all_headers = {**ACCEPT, **headers}
    if host is not None:
        all_headers["Host"] = host
    return httpx2.post(url, headers=all_headers, content=json.dumps(INIT), timeout=10)


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
            assert response.headers["mcp-session-id"].startswith("z1."), "initialize opens a session"


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


async def test_a_ten_megabyte_patch_is_applied_over_http(gateway: HttpGateway, tmp_path: Path) -> None:
    # docs/modes.md#http-listeners: bodies up to mcp.max-body (64 MiB), far above a patch's 16 Mi characters.
    line = "+" + "x" * 99 + "\n"
    lines = 10 * 1024 * 1024 // len(line)
    patch = f"*** Begin Patch\n*** Add File: big.txt\n{line * lines}*** End Patch"
    async with http_client(gateway.url, {"X-Zodex-Local-Token": gateway.token}) as mcp:
        result = await mcp.call("apply_patch", patch=patch, workdir=str(tmp_path))
    assert not result.is_error, result.content[0].text
    assert (tmp_path / "big.txt").stat().st_size == lines * (len(line) - 1)


def test_a_body_that_is_not_json_gets_a_json_rpc_parse_error(gateway: HttpGateway) -> None:
    url = f"http://127.0.0.1:{gateway.port}/mcp"
    headers = {**ACCEPT, "X-Zodex-Local-Token": gateway.token}
    response = httpx2.post(url, headers=headers, content=b"this is not json", timeout=10)
    assert response.status_code == 400
    assert response.json()["id"] is None and response.json()["error"]["code"] == -32700


def test_an_unpaired_surrogate_is_a_tool_error_naming_the_field(gateway: HttpGateway, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{gateway.port}/mcp"
    headers = {**ACCEPT, "X-Zodex-Local-Token": gateway.token}
    call = {"name": "exec_command", "arguments": {"cmd": "echo \ud800 > made", "workdir": str(tmp_path)}}
    body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": call})  # \ud800 escaped
    response = httpx2.post(url, headers=headers, content=body, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 9,
        "result": {
            "content": [{"type": "text", "text": "cmd must be valid Unicode (unpaired surrogate)"}],
            "isError": True,
        },
    }
    assert not (tmp_path / "made").exists(), "nothing ran"


def test_a_foreground_gateway_signs_session_ids_with_the_key_kept_in_its_state(genv: GatewayEnv) -> None:
    # docs/modes.md#transports: <state>/runtime/mcp-session-key, the Local runtime's own key.
    key = genv.state_home / "zodex" / "local" / "runtime" / "mcp-session-key"
    first = start_http_gateway(genv)
    try:
        session = post(first, {"X-Zodex-Local-Token": first.token}).headers["mcp-session-id"]
    finally:
        first.stop()
    assert key.stat().st_mode & 0o777 == 0o600
    second = start_http_gateway(genv)  # a new process with the same key accepts the id
    try:
        good = {"X-Zodex-Local-Token": second.token}
        kept = post(second, {**good, "Mcp-Session-Id": session})
        assert kept.status_code == 200 and kept.headers["mcp-session-id"] == session
        forged = post(second, {**good, "Mcp-Session-Id": session[:-1] + ("0" if session[-1] != "0" else "1")})
        assert forged.status_code == 404 and forged.json()["error"]["code"] == -32600
    finally:
        second.stop()
