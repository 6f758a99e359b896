"""Two fleet hosts, each in its own network namespace, behind gateways in the root
namespace, called with the real mcp SDK client over HTTP (docs/fleet.md). Root only."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fleet.fleet_support import (
    Gateway,
    Host,
    Stopwatch,
    error_text,
    fleet_host,
    mcp,
    mcp_key,
    require_netns,
    result_json,
    write_gateway_config,
)
from tests.support.accounts import runnable_install
from tests.support.curve_peer import refused_handshake
from tests.support.gateway import Mcp
from tests.support.handshake import INIT
from tests.support.progress import a_cancel_leaves_output_and_command
from tests.support.slowdown import scaled
from zodex_gateway.fleet import keys

pytestmark = pytest.mark.timeout(240)


@dataclass
class Fleet:
    a: Host
    b: Host
    gw1: Gateway
    gw2: Gateway
    base: Path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require_netns()
    base = tmp_path_factory.mktemp("fleet")
    base.chmod(0o755)
    gateway_keys = base / "gateways"
    gateway_keys.mkdir()
    gateway_keys.chmod(0o755)
    keys.keygen(gateway_keys, "gw")  # gw.key stays here: the hosts read only *.pub
    with (
        runnable_install() as venv,
        fleet_host("alpha", venv / "bin" / "python3", gateway_keys) as a,
        fleet_host("beta", venv / "bin" / "python3", gateway_keys) as b,
    ):
        python = venv / "bin" / "python3"
        gw1, gw2 = Gateway(base / "gw1.toml", python), Gateway(base / "gw2.toml", python)
        for gw in (gw1, gw2):
            write_gateway_config(gw.config, gateway_keys / "gw.key", [a, b], gw.port)
        try:
            gw1.start()
            gw2.start()
            yield Fleet(a, b, gw1, gw2, base)
        finally:
            gw1.stop()
            gw2.stop()


async def test_a_command_runs_on_the_host_its_address_names(fleet: Fleet) -> None:
    for host, other in ((fleet.a, fleet.b), (fleet.b, fleet.a)):
        async with mcp(fleet.gw1, host) as session:
            ran = result_json(
                await session.call_tool(
                    "exec_command", {"cmd": "ip -4 addr; id -un", "workdir": str(host.workspace)}
                )
            )
        assert ran["status"] == "exited" and ran["exit_code"] == 0, ran
        assert f"inet {host.ns.host_address}/30" in ran["output"]
        assert other.ns.host_address not in ran["output"]
        assert ran["output"].rstrip().endswith(host.agent.name)


async def test_a_handle_answers_only_on_its_own_host(fleet: Fleet) -> None:
    async with mcp(fleet.gw1, fleet.a) as on_a:
        started = result_json(
            await on_a.call_tool(
                "exec_command", {"cmd": "sleep 30", "workdir": str(fleet.a.workspace), "yield_time_ms": 100}
            )
        )
    handle = started["session_handle"]
    assert len(handle) <= 32 and handle.count("-") == 1
    async with mcp(fleet.gw1, fleet.b) as on_b:
        wrong = await on_b.call_tool("write_stdin", {"session_handle": handle})
    assert error_text(wrong) == f"Unknown session handle: {handle}"
    async with mcp(fleet.gw2, fleet.a) as on_a:
        killed = result_json(
            await on_a.call_tool("write_stdin", {"session_handle": handle, "kill_process": True})
        )
    assert killed["status"] == "exited" and killed["termination_reason"] == "killed"


async def test_a_wrong_key_gets_nothing(fleet: Fleet) -> None:
    # An MCP key of another host, or none: 401 with an empty body, nothing forwarded.
    async with httpx2.AsyncClient(timeout=10) as http:
        for query in (f"?key={mcp_key(fleet.b)}", "", "?key=x"):
            answer = await http.post(
                f"{fleet.gw1.url}/h/{fleet.a.name}/mcp{query}",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Accept": "application/json, text/event-stream"},
            )
            assert (answer.status_code, answer.content) == (401, b""), query
        assert (await http.get(f"{fleet.gw1.url}/h/nosuch/mcp")).status_code == 404
    # A gateway whose CURVE key the hosts do not allow: ZAP refuses it, and its calls time
    # out as unreachable.
    stranger_keys = fleet.base / "stranger"
    stranger_keys.mkdir(exist_ok=True)
    keys.keygen(stranger_keys, "stranger")
    stranger = Gateway(fleet.base / "stranger.toml", fleet.gw1.python)
    write_gateway_config(stranger.config, stranger_keys / "stranger.key", [fleet.a, fleet.b], stranger.port)
    refusals = fleet.a.log().count("refused a gateway")
    stranger.start()
    try:
        async with mcp(stranger, fleet.a) as session:
            with Stopwatch() as took:
                refused = await session.call_tool(
                    "exec_command", {"cmd": "touch /tmp/should-not-exist", "workdir": str(fleet.a.workspace)}
                )
        assert error_text(refused).startswith(f"host {fleet.a.name} is unreachable; the call was not sent.")
        assert took.elapsed < 3.0
        assert fleet.a.log().count("refused a gateway") > refusals
    finally:
        stranger.stop()
    # The same key retrying in a loop: its first refusal was logged, the rest are counted
    # for a line a minute (docs/fleet.md#hosts), not logged one by one.
    public = keys.read_public_key(stranger_keys / "stranger.pub")
    secret = keys.read_z85_secret(stranger_keys / "stranger.key")
    host_public = keys.read_public_key(fleet.a.keys_dir / "host.pub")
    for _ in range(5):
        await refused_handshake(fleet.a.endpoint, host_public, public, secret)
    named = [line for line in fleet.a.log().splitlines() if public.decode() in line]
    assert len(named) == 1 and named[0].endswith(
        f"refused a gateway whose key is not allowed: {public.decode()}"
    ), named


def _stream_cmd(prefix: str, count: int, pause: str) -> str:
    return f"for i in $(seq 1 {count}); do echo {prefix}$i; sleep {pause}; done"


async def test_exec_through_one_gateway_type_poll_and_kill_through_another(fleet: Fleet) -> None:
    async with mcp(fleet.gw1, fleet.a) as one:
        started = result_json(
            await one.call_tool(
                "exec_command",
                {
                    "cmd": "read line; echo got:$line; sleep 60",
                    "workdir": str(fleet.a.workspace),
                    "yield_time_ms": 200,
                },
            )
        )
    handle = started["session_handle"]
    async with mcp(fleet.gw2, fleet.a) as two:
        typed = result_json(
            await two.call_tool(
                "write_stdin", {"session_handle": handle, "chars": "hello\n", "yield_time_ms": 500}
            )
        )
        assert "got:hello" in typed["output"] and typed["status"] == "running"
        killed = result_json(
            await two.call_tool("write_stdin", {"session_handle": handle, "kill_process": True})
        )
    assert killed["status"] == "exited" and killed["termination_reason"] == "killed"
    async with mcp(fleet.gw1, fleet.a) as one:
        again = result_json(await one.call_tool("write_stdin", {"session_handle": handle}))
    assert again["status"] == "exited" and again["output"] == ""


def _post(gateway: Gateway, host: Host, body: dict[str, object], session_id: str | None) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if session_id is not None:
        headers["Mcp-Session-Id"] = session_id
    return httpx2.post(
        f"{gateway.url}/h/{host.name}/mcp?key={mcp_key(host)}", json=body, headers=headers, timeout=30
    )


def test_one_mcp_session_is_served_by_every_gateway_and_outlives_their_restarts(fleet: Fleet) -> None:
    begun = _post(fleet.gw1, fleet.a, INIT, None)
    assert begun.status_code == 200, begun.text
    session_id = begun.headers["mcp-session-id"]
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "exec_command",
            "arguments": {"cmd": "echo same", "workdir": str(fleet.a.workspace)},
        },
    }

    def served_by(gateway: Gateway) -> None:
        answer = _post(gateway, fleet.a, call, session_id)
        assert answer.status_code == 200, answer.text
        assert "same" in answer.json()["result"]["content"][0]["text"], answer.text

    served_by(fleet.gw2)
    fleet.gw1.restart()
    fleet.gw2.restart()
    served_by(fleet.gw1)
    served_by(fleet.gw2)
    forged = _post(fleet.gw2, fleet.a, call, session_id[:-1] + ("0" if session_id[-1] != "0" else "1"))
    assert forged.status_code == 404 and "was not issued by this server" in forged.text, forged.text


async def test_every_gateway_restarts_mid_stream_and_the_old_handle_reads_the_rest(fleet: Fleet) -> None:
    count = 60
    async with mcp(fleet.gw1, fleet.b) as session:
        first = result_json(
            await session.call_tool(
                "exec_command",
                {
                    "cmd": _stream_cmd("line", count, "0.05"),
                    "workdir": str(fleet.b.workspace),
                    "yield_time_ms": 500,
                },
            )
        )
    assert first["status"] == "running"
    handle, outputs = first["session_handle"], [first["output"]]
    fleet.gw1.restart()
    fleet.gw2.restart()
    status = "running"
    while status == "running":
        async with mcp(fleet.gw2 if len(outputs) % 2 else fleet.gw1, fleet.b) as session:
            polled = result_json(
                await session.call_tool("write_stdin", {"session_handle": handle, "yield_time_ms": 700})
            )
        outputs.append(polled["output"])
        status = polled["status"]
    lines = "".join(outputs).split()
    assert lines == [f"line{i}" for i in range(1, count + 1)], outputs


async def test_a_host_that_stops_answering_fails_fast_while_another_keeps_streaming(fleet: Fleet) -> None:
    async with mcp(fleet.gw1, fleet.b) as on_b:
        streaming = result_json(
            await on_b.call_tool(
                "exec_command",
                {
                    "cmd": _stream_cmd("b", 400, "0.02"),
                    "workdir": str(fleet.b.workspace),
                    "yield_time_ms": 100,
                },
            )
        )
    async with mcp(fleet.gw1, fleet.a) as on_a:
        waiting = result_json(
            await on_a.call_tool(
                "exec_command", {"cmd": "sleep 30", "workdir": str(fleet.a.workspace), "yield_time_ms": 100}
            )
        )
    workspace = str(fleet.a.workspace)
    calls = [  # a long poll in flight as the host stops, then every tool while it is known down
        ("write_stdin", {"session_handle": waiting["session_handle"], "yield_time_ms": 20_000}),
        ("exec_command", {"cmd": "true", "workdir": workspace}),
        (
            "apply_patch",
            {"patch": "*** Begin Patch\n*** Add File: p.txt\n+p\n*** End Patch", "workdir": workspace},
        ),
    ]
    assert fleet.a.process is not None
    fleet.a.process.send_signal(signal.SIGSTOP)
    try:
        async with mcp(fleet.gw1, fleet.a) as on_a, mcp(fleet.gw1, fleet.b) as on_b:
            for tool, args in calls:
                with Stopwatch() as took:
                    failed = await on_a.call_tool(tool, args)
                assert error_text(failed).startswith(f"host {fleet.a.name} is unreachable; "), tool
                assert took.elapsed < 3.0, (tool, took.elapsed)
                polled = result_json(
                    await on_b.call_tool(
                        "write_stdin", {"session_handle": streaming["session_handle"], "yield_time_ms": 300}
                    )
                )
                assert re.search(r"^b\d+$", polled["output"], re.M), polled
    finally:
        fleet.a.process.send_signal(signal.SIGCONT)
    async with mcp(fleet.gw2, fleet.a) as on_a:
        back = result_json(
            await on_a.call_tool("exec_command", {"cmd": "echo back", "workdir": str(fleet.a.workspace)})
        )
    assert back["output"].strip() == "back"
    async with mcp(fleet.gw2, fleet.a) as on_a:  # the session on A outlived the freeze
        ended = result_json(
            await on_a.call_tool(
                "write_stdin", {"session_handle": waiting["session_handle"], "kill_process": True}
            )
        )
    assert ended["termination_reason"] == "killed", ended


async def test_a_restarted_host_answers_its_old_handles_lost(fleet: Fleet) -> None:
    async with mcp(fleet.gw1, fleet.a) as on_a:
        started = result_json(
            await on_a.call_tool(
                "exec_command", {"cmd": "sleep 60", "workdir": str(fleet.a.workspace), "yield_time_ms": 100}
            )
        )
    handle = started["session_handle"]
    fleet.a.stop()
    async with mcp(fleet.gw2, fleet.a) as on_a:
        with Stopwatch() as took:
            down = await on_a.call_tool("write_stdin", {"session_handle": handle})
    assert error_text(down).startswith(f"host {fleet.a.name} is unreachable; the call was not sent.")
    assert took.elapsed < 3.0
    fleet.a.start()
    async with mcp(fleet.gw2, fleet.a) as on_a:
        lost = await on_a.call_tool("write_stdin", {"session_handle": handle})
        assert error_text(lost) == (
            f"session {handle} was lost: host {fleet.a.name} restarted since the command started; "
            "start the command again"
        )
        never = handle[:-6] + ("000000" if not handle.endswith("000000") else "000001")
        assert error_text(await on_a.call_tool("write_stdin", {"session_handle": never})) == (
            f"Unknown session handle: {never}"
        )


async def test_a_gateway_with_another_signing_key_fails_at_once_saying_so(fleet: Fleet) -> None:
    other = fleet.base / "other-signing"
    other.mkdir(exist_ok=True)
    keys.keygen(other, "host", "signing")
    gateway = Gateway(fleet.base / "other-signing.toml", fleet.gw1.python)
    write_gateway_config(gateway.config, fleet.base / "gateways" / "gw.key", [fleet.a], gateway.port)
    text = gateway.config.read_text().replace(
        str(fleet.a.keys_dir / "host.signing"), str(other / "host.signing")
    )
    gateway.config.write_text(text)
    gateway.start()
    try:
        async with mcp(gateway, fleet.a) as session:
            with Stopwatch() as took:
                refused = await session.call_tool(
                    "exec_command", {"cmd": "true", "workdir": str(fleet.a.workspace)}
                )
        assert error_text(refused).startswith(
            f"host {fleet.a.name} answered with a message this gateway cannot verify ("
        )
        assert took.elapsed < 3.0
    finally:
        gateway.stop()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_every_tool_at_the_clients_default_revision_and_at_the_handshake(
    fleet: Fleet, mode: str
) -> None:
    """docs/modes.md#revisions: the SDK's client as it comes (2026-07-28) and pinned to the
    handshake, through a fleet gateway to a host: results, never errors."""
    host = fleet.a
    url = f"{fleet.gw1.url}/h/{host.name}/mcp?key={mcp_key(host)}"
    workdir = str(host.workspace)
    async with (
        httpx2.AsyncClient(timeout=90) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        assert client.protocol_version == {"auto": "2026-07-28", "legacy": "2025-11-25"}[mode]
        ran = result_json(await client.call_tool("exec_command", {"cmd": "id -un", "workdir": workdir}))
        assert ran["output"] == f"{host.agent.name}\n"
        running = result_json(
            await client.call_tool(
                "exec_command", {"cmd": "read l; echo got $l", "workdir": workdir, "yield_time_ms": 50}
            )
        )
        handle = running["session_handle"]
        typed = result_json(
            await client.call_tool(
                "write_stdin", {"session_handle": handle, "chars": "x\n", "yield_time_ms": 5000}
            )
        )
        assert "got x" in typed["output"]
        patch = f"*** Begin Patch\n*** Add File: revision-{mode}.txt\n+made\n*** End Patch\n"
        patched = await client.call_tool("apply_patch", {"patch": patch, "workdir": workdir})
        assert not patched.is_error, patched.content[0].text


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_waiting_call_reports_progress_and_a_cancel_ends_its_wait_on_the_host(
    fleet: Fleet, mode: str
) -> None:
    """docs/fleet.md#the-wire: a call waiting on a host hears its progress notes through the
    fleet gateway (default interval, 5 s), and its client's cancel ends the host's wait: the
    output stays for the next poll, which the session, no longer held, answers at once."""
    host = fleet.a
    fifo = host.workspace / f"gate-{mode}"
    os.mkfifo(fifo)
    os.chown(fifo, host.agent.uid, host.agent.gid)
    url = f"{fleet.gw1.url}/h/{host.name}/mcp?key={mcp_key(host)}"
    try:
        async with (
            httpx2.AsyncClient(timeout=scaled(90)) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
        ):
            await a_cancel_leaves_output_and_command(Mcp(client), host.workspace, fifo)
    finally:
        fifo.unlink()
