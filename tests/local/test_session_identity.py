"""Identity without server state through a real Local runtime and the real MCP SDK client
(docs/agents.md#identity, docs/modes.md#mcp-endpoint): a handshake client gets a signed
Mcp-Session-Id, its calls are one agent, and the same id is the same agent after a restart;
any other id is 404 and changes nothing; no id is served unattributed."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.local import LocalEnv, connected, local_env
from zodex_gateway.history import HistoryStore
from zodex_gateway.mcp.alias_tool import NO_IDENTITY
from zodex_gateway.redaction import REDACTED
from zodex_gateway.serve.mcp_http import UNKNOWN_SESSION

pytestmark = pytest.mark.timeout(120)

ACCEPT = "application/json, text/event-stream"


def key_file(local: LocalEnv) -> Path:
    return local.root / "state" / "zodex" / "local" / "runtime" / "mcp-session-key"


def token_and_url(local: LocalEnv) -> tuple[str, str]:
    discovery = local.discovery()
    return Path(discovery["mcp"]["token_path"]).read_text().strip(), discovery["mcp"]["url"]


@dataclass
class Handshake:
    """An SDK client that opened its conversation with initialize (mode="legacy")."""

    client: Client
    session_ids: list[str] = field(default_factory=list)

    async def call(self, tool: str, **args: Any) -> Any:
        return await self.client.call_tool(tool, args)

    @property
    def session_id(self) -> str:
        assert self.session_ids, "initialize was answered without an Mcp-Session-Id"
        return self.session_ids[0]


@contextlib.asynccontextmanager
async def handshake(local: LocalEnv, session: str | None = None) -> AsyncIterator[Handshake]:
    """``session``: an id from earlier, sent from the first request on (as a bridge that
    keeps one id for its whole life does)."""
    token, url = token_and_url(local)
    headers = {"X-Zodex-Local-Token": token}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    http = create_mcp_http_client(headers=headers)
    seen: list[str] = []

    async def record(response: httpx2.Response) -> None:
        issued = response.headers.get("mcp-session-id")
        if issued is not None:
            seen.append(issued)

    http.event_hooks["response"].append(record)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        yield Handshake(client, seen)


def post(
    local: LocalEnv, body: dict[str, Any], *, method: str = "POST", session: str | None = None
) -> httpx2.Response:
    token, url = token_and_url(local)
    headers = {"X-Zodex-Local-Token": token, "Accept": ACCEPT, "Content-Type": "application/json"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return httpx2.request(method, url, content=json.dumps(body), headers=headers, timeout=20)


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def records(local: LocalEnv) -> list[dict[str, Any]]:
    data = json.loads(local.run("local", "history", "--format", "json").stdout)
    invocations: list[dict[str, Any]] = data["invocations"]
    return invocations


def agent_ids(local: LocalEnv) -> list[str]:
    store = HistoryStore(local.root / "state" / "zodex" / "local" / "history", recover=False)
    try:
        return sorted(agent.agent_id for agent in store.agents())
    finally:
        store.close()


async def test_a_handshake_session_is_one_agent_across_a_restart(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with handshake(local) as first:
            session = first.session_id
            assert re.fullmatch(r"z1\.[0-9a-f]{32}\.[0-9a-f]{32}", session)
            labelled = await first.call("set_agent_alias", alias="Inspector run")
            assert not labelled.is_error, labelled.content
            agent = labelled.structured_content["agent_id"]
            for word in ("one", "two"):
                ran = await first.call("exec_command", cmd=f"echo {word}", workdir=str(tmp_path))
                assert not ran.is_error
        info = key_file(local).stat()
        assert info.st_mode & 0o777 == 0o600 and info.st_uid == os.geteuid()

        local.run("local", "stop")
        local.run("local", "start", str(tmp_path))
        async with handshake(local, session) as again:
            assert again.session_ids[0] == session, "initialize with a verified id keeps it"
            relabelled = await again.call("set_agent_alias", alias="Inspector run, part 2")
            assert relabelled.structured_content["agent_id"] == agent, "the same agent after a restart"
            await again.call("exec_command", cmd="echo three", workdir=str(tmp_path))
        # Without initialize too: the id alone names the conversation.
        assert (
            post(
                local, tool_call("exec_command", cmd="echo four", workdir=str(tmp_path)), session=session
            ).status_code
            == 200
        )

        rows = records(local)
        assert len(rows) == 4 and {r["agent_id"] for r in rows} == {agent}
        assert agent_ids(local) == [agent]
        assert key_file(local).stat().st_ino == info.st_ino, "the key is kept, not remade"


async def test_any_other_id_is_404_and_changes_nothing(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with handshake(local) as client:
            session = client.session_id
            await client.call("exec_command", cmd="true", workdir=str(tmp_path))
        before_rows, before_agents = records(local), agent_ids(local)
        mac = session[-1]
        refused = {
            "forged (valid shape, wrong MAC)": session[:-1] + ("0" if mac != "0" else "1"),
            "malformed": "session-1234",
            "oversized": session + "0" * 4000,
        }
        marker = tmp_path / "ran"
        for case, value in refused.items():
            for body in (
                tool_call("exec_command", cmd=f"touch {marker}", workdir=str(tmp_path)),
                tool_call("set_agent_alias", alias="Hijacked"),
            ):
                response = post(local, body, session=value)
                assert response.status_code == 404, (case, response.text)
                assert response.json() == {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32600, "message": UNKNOWN_SESSION},
                }, case
            assert post(local, {}, method="DELETE", session=value).status_code == 404, case
        assert not marker.exists(), "no command ran"
        assert records(local) == before_rows and agent_ids(local) == before_agents
        # Sessions are not kept, so there is none to end: DELETE of a verified id is 405.
        assert post(local, {}, method="DELETE", session=session).status_code == 405


async def test_no_id_is_served_unattributed_and_openai_session_wins(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        plain = post(local, tool_call("exec_command", cmd="echo plain", workdir=str(tmp_path)))
        assert plain.status_code == 200 and "plain" in plain.text
        # A per-request (2026-07-28) client: no initialize, no session.
        async with connected(local) as per_request:
            ran = await per_request.client.call_tool(
                "exec_command", {"cmd": "echo modern", "workdir": str(tmp_path)}
            )
            assert not ran.is_error
            refused = await per_request.client.call_tool("set_agent_alias", {"alias": "Nobody"})
            assert refused.is_error and refused.content[0].text == NO_IDENTITY
            named = await per_request.client.call_tool(
                "set_agent_alias", {"alias": "ChatGPT"}, meta={"openai/session": "conv-chat"}
            )
        chat_agent = named.structured_content["agent_id"]
        async with handshake(local) as client:
            own = (await client.call("set_agent_alias", alias="Session")).structured_content["agent_id"]
            meta = {"openai/session": "conv-chat"}
            won = await client.client.call_tool(
                "exec_command", {"cmd": "echo won", "workdir": str(tmp_path)}, meta=meta
            )
            assert not won.is_error
        assert own != chat_agent
        rows = records(local)
        assert [r["agent_id"] for r in rows] == [None, None, chat_agent], (
            "openai/session before the session id"
        )
        assert agent_ids(local) == sorted([chat_agent, own])


async def test_the_refusal_without_identity_says_how_to_get_one(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        response = post(local, tool_call("set_agent_alias", alias="Nobody"))
        result = response.json()["result"]
        assert result["isError"] is True and result["content"][0]["text"] == NO_IDENTITY
        assert "`zodex local connect`" in NO_IDENTITY and "Mcp-Session-Id" in NO_IDENTITY
        assert agent_ids(local) == []


def refused_start(local: LocalEnv, tmp_path: Path) -> str:
    done = local.run("local", "start", str(tmp_path), check=False)
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


async def test_a_key_open_to_others_is_refused_and_left_alone(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        local.run("local", "stop")
        key = key_file(local)
        content = key.read_bytes()
        os.chmod(key, 0o640)
        assert refused_start(local, tmp_path) == (
            f"error: {key} is open to group or others (mode 0640): Zodex will not use it as a secret, "
            "which others may have read; remove it"
        )
        assert key.read_bytes() == content and key.stat().st_mode & 0o777 == 0o640
        assert not local.discovery_file.exists()
        key.unlink()  # as the message says: a new key, and old ids stop working
        local.run("local", "start", str(tmp_path))
        assert key.stat().st_mode & 0o777 == 0o600 and key.read_bytes() != content


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another account needs root")
async def test_a_key_owned_by_another_account_is_refused(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "setup")
        key = key_file(local)
        key.write_text("0" * 64 + "\n")  # planted: a key the other account knows
        os.chmod(key, 0o600)
        os.chown(key, pwd.getpwnam("nobody").pw_uid, -1)
        assert refused_start(local, tmp_path) == (
            f"error: {key} is owned by nobody, not by you (root): Zodex will not use it as a secret; remove it"
        )
        assert not local.discovery_file.exists()


async def test_the_key_is_a_secret_viewers_never_see(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        key = key_file(local).read_text().strip()
        async with handshake(local) as client:
            printed = await client.call("exec_command", cmd=f"cat {key_file(local)}", workdir=str(tmp_path))
            assert printed.structured_content["output"].strip() == key, "the model gets what it ran"
        raw = local.run("local", "history", "--raw", "--format", "json").stdout
        assert key not in raw and REDACTED in raw


async def test_a_damaged_key_stops_start_with_the_reason(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        local.run("local", "stop")
        key_file(local).write_text("not a key\n")  # keeps its 0600 mode
        line = refused_start(local, tmp_path)
        assert line.startswith("error: Zodex Local failed to start: "), line
        assert (
            f" ERROR {key_file(local)} does not hold a session key (64 hex characters): remove it and a "
            "new one is made (session ids issued under the old key stop working) (see `"
        ) in line, line
        assert key_file(local).read_text() == "not a key\n" and not local.discovery_file.exists()
