"""The bridge's own answers (Local down) are the runtime's, at every revision
(docs/modes.md#revisions): the same requests, through one `zodex local connect`, with Local
running (forwarded: the runtime's MCP SDK answers) and then stopped (the bridge answers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types.version as sdk_versions
import pytest

from tests.support.local import local_env
from tests.support.raw_bridge import RawBridge, modern
from zodex_gateway.local.bridge import revisions

pytestmark = pytest.mark.timeout(120)

CLIENT = {"capabilities": {}, "clientInfo": {"name": "revisions-test", "version": "0"}}
# Every opening and listing a client may send, in both eras, and what a server must refuse.
REQUESTS: dict[str, tuple[str, dict[str, Any] | None]] = {
    **{
        f"initialize {version}": ("initialize", {"protocolVersion": version, **CLIENT})
        for version in (*sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS, "1999-01-01", "2026-07-28")
    },
    "handshake ping": ("ping", None),
    "handshake tools/list": ("tools/list", None),
    "handshake server/discover": ("server/discover", None),
    "handshake unknown method": ("zodex/nothing", None),
    "modern server/discover": ("server/discover", modern()),
    "modern tools/list": ("tools/list", modern()),
    "modern ping": ("ping", modern()),
    "modern unknown method": ("zodex/nothing", modern()),
    "modern initialize": ("initialize", modern({"protocolVersion": "2025-06-18", **CLIENT})),
    "unsupported revision": ("tools/list", modern(version="2027-01-01")),
}


def ask_all(bridge: RawBridge) -> dict[str, dict[str, Any]]:
    answers = {}
    for number, (name, (method, params)) in enumerate(REQUESTS.items()):
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": number, "method": method}
        if params is not None:
            message["params"] = params
        answers[name] = bridge.ask(message)
    return answers


def failed_call(bridge: RawBridge, workdir: str, envelope: bool) -> dict[str, Any]:
    params = {"name": "exec_command", "arguments": {"cmd": "true", "workdir": workdir}}
    result = bridge.ask(
        {
            "jsonrpc": "2.0",
            "id": "call",
            "method": "tools/call",
            "params": modern(params) if envelope else params,
        }
    )["result"]
    assert result["isError"] is True
    return result


def test_the_bridge_writes_out_the_sdks_version_lists() -> None:
    assert revisions.HANDSHAKE_VERSIONS == sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS
    assert revisions.MODERN_VERSIONS == sdk_versions.MODERN_PROTOCOL_VERSIONS
    assert revisions.LATEST_HANDSHAKE == sdk_versions.LATEST_HANDSHAKE_VERSION


def test_every_answer_with_local_down_is_the_runtimes(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        bridge = RawBridge(local)
        try:
            # A call the runtime runs: the bridge has met this runtime and its start directory.
            params = modern({"name": "exec_command", "arguments": {"cmd": "true", "workdir": str(tmp_path)}})
            warm = bridge.ask({"jsonrpc": "2.0", "id": "warm", "method": "tools/call", "params": params})
            assert warm["result"]["isError"] is False
            running = ask_all(bridge)
            calls_running = {era: failed_call(bridge, "relative", era) for era in (False, True)}
            local.run("local", "stop")
            down = ask_all(bridge)
            calls_down = {era: failed_call(bridge, str(tmp_path), era) for era in (False, True)}
        finally:
            bridge.close()
    assert (
        "Suggested first workdir: " + str(tmp_path)
        in running["modern server/discover"]["result"]["instructions"]
    )
    for name in REQUESTS:
        assert down[name] == running[name], name
    for era in (False, True):
        mine, runtimes = calls_down[era], calls_running[era]
        assert mine.keys() == runtimes.keys(), (era, mine, runtimes)
        assert [part.keys() for part in mine["content"]] == [part.keys() for part in runtimes["content"]]
        assert mine.get("_meta") == runtimes.get("_meta") and mine.get("resultType") == runtimes.get(
            "resultType"
        )
    assert calls_down[True]["resultType"] == "complete" and "resultType" not in calls_down[False]


@pytest.mark.parametrize("running", [False, True], ids=["local down", "local running"])
def test_the_bridge_answers_without_loading_the_sdk(tmp_path: Path, running: bool) -> None:
    """Opening, listing and calling through the bridge loads no MCP SDK, pydantic, HTTP or
    ZeroMQ library and no CLI: its start is a Python start and a little more."""
    script = """
import io, json, sys
from zodex_gateway.local.bridge.stdio import run_bridge
from zodex_gateway.local.paths import LocalPaths
lines = sys.stdin.buffer.read()
out = io.BytesIO()
run_bridge(LocalPaths.from_env(), stdin=io.BytesIO(lines), stdout=out)
sys.stderr.write(out.getvalue().decode())
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", **CLIENT}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": modern()},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": modern()},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": modern({"name": "exec_command", "arguments": {"cmd": "echo hi", "workdir": str(tmp_path)}})},
    ]  # fmt: skip
    import json

    with local_env() as local:
        if running:
            local.run("local", "start", str(tmp_path))
        done = subprocess.run(
            [sys.executable, "-c", script],
            input="\n".join(json.dumps(r) for r in requests).encode(),
            capture_output=True,
            env=local.env(),
            timeout=60,
        )
    assert done.returncode == 0, done.stderr.decode()
    answers = [json.loads(line) for line in done.stderr.decode().splitlines()]
    assert sorted(a["id"] for a in answers) == [1, 2, 3, 4, 5] and all("result" in a for a in answers)
    call = next(a for a in answers if a["id"] == 5)["result"]
    assert call["isError"] is (not running) and call["resultType"] == "complete"
    loaded = set(json.loads(done.stdout))
    heavy = {
        "mcp",
        "mcp_types",
        "pydantic",
        "pydantic_core",
        "starlette",
        "uvicorn",
        "zmq",
        "httpx",
        "httpx2",
        "anyio",
        "click",
        "http",
    }
    assert loaded & heavy == set(), loaded & heavy
