"""A request without Local's token is told where the current entry is, and the probes an
OAuth client makes next get that same line, so that no client goes on to open a browser or
register itself (docs/modes.md#mcp-endpoint)."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from tests.support.local import ZODEX, local_env

pytestmark = pytest.mark.timeout(60)

REFUSAL = f"missing or invalid token; print this runtime's HTTP entry with `{ZODEX} local mcp-config --http`"
PROBES = [
    ("GET", "/.well-known/oauth-protected-resource"),
    ("GET", "/.well-known/oauth-protected-resource/mcp"),
    ("GET", "/.well-known/oauth-authorization-server"),
    ("GET", "/.well-known/oauth-authorization-server/mcp"),
    ("GET", "/.well-known/openid-configuration"),
    ("POST", "/register"),
]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def test_a_refused_request_names_the_command_and_oauth_probes_get_no_invitation(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        url = local.discovery()["mcp"]["url"]
        token = Path(local.discovery()["mcp"]["token_path"]).read_text().strip()
        base = url.removesuffix("/mcp")
        with httpx2.Client(timeout=10) as http:
            for headers in ({}, {"X-Zodex-Local-Token": "x" * 64}, {"Authorization": "Bearer " + "y" * 64}):
                refused = http.post(url, json=INITIALIZE, headers={**ACCEPT, **headers})
                assert refused.status_code == 401, refused.text
                assert refused.json() == {"error": REFUSAL}
                assert refused.headers["www-authenticate"] == "Bearer"
            for method, path in PROBES:
                probe = http.request(method, base + path, json={"redirect_uris": ["http://127.0.0.1:1/cb"]})
                assert probe.status_code == 400, (path, probe.status_code)
                assert probe.json() == {"error": "invalid_request", "error_description": REFUSAL}, path
            # Only those paths: anything else is still the plain 404, and a near miss is not a probe.
            for path in ("/.well-known/oauth-protected-resourcex", "/registers", "/.well-known/other"):
                other = http.get(base + path)
                assert other.status_code == 404 and other.json() == {
                    "error": "not found; the MCP endpoint is /mcp"
                }
            served = http.post(url, json=INITIALIZE, headers={**ACCEPT, "X-Zodex-Local-Token": token})
            assert served.status_code == 200 and served.json()["result"]["serverInfo"]["name"] == "zodex"
