"""The observer API of a real Local runtime: discovery, bearer, live events from real
tool calls, timeline recovery, alias edits, rotation, and no secret ever in a response."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.local.test_agents_and_history import call
from tests.support.gate import Gate
from tests.support.gateway import wait_for
from tests.support.local import LocalEnv, connected, local_env, observer_bearer
from tests.support.sse import SseStream, sse

pytestmark = pytest.mark.timeout(120)


def observer(local: LocalEnv) -> tuple[str, str]:
    return local.discovery()["observability"]["base_url"], observer_bearer(local)


def get(local: LocalEnv, path: str, bearer: str | None = None) -> httpx2.Response:
    base, current = observer(local)
    return httpx2.get(f"{base}{path}", headers={"Authorization": f"Bearer {bearer or current}"}, timeout=10)


async def seen_or_next(stream: SseStream, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first event read so far that matches, or the next one to come."""
    return next((e for e in stream.events if predicate(e)), None) or await stream.until(predicate)


async def command_settled(stream: SseStream) -> dict[str, Any]:
    """Wait for a command's call to complete and then for its record's last update, the one
    after its invocation_completed, process_ended and output_complete (the call's result and
    the worker's events travel apart, in either order); the completed event."""
    done = await seen_or_next(stream, lambda e: e["event_type"] == "invocation_completed")
    presentation = done["presentation_id"]
    last = done["sequence"]
    for kind in ("process_ended", "output_complete"):
        event = await seen_or_next(
            stream, lambda e, kind=kind: e["event_type"] == kind and e["presentation_id"] == presentation
        )
        last = max(last, event["sequence"])
    await seen_or_next(
        stream,
        lambda e: (
            e["event_type"] == "presentation_updated"
            and e["presentation_id"] == presentation
            and e["sequence"] > last
        ),
    )
    return done


def of_type(stream: SseStream, event_type: str, presentation_id: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in stream.events
        if e["event_type"] == event_type
        and (presentation_id is None or e["presentation_id"] == presentation_id)
    ]


async def test_discovery_advertises_the_observer_behind_a_bearer(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        info = discovery["observability"]
        assert info["api_version"] == 1 and info["base_url"].startswith("http://127.0.0.1:")
        assert info["base_url"] not in discovery["mcp"]["url"], "its own port, apart from MCP"
        bearer_file = Path(info["bearer_token_path"])
        assert bearer_file.stat().st_mode & 0o777 == 0o600
        bearer = bearer_file.read_text().strip()
        assert len(bearer) >= 32
        status = get(local, "/v1/status")
        assert status.status_code == 200 and status.json()["runtime_id"] == discovery["runtime_id"]
        assert status.headers["cache-control"] == "no-store"
        assert "access-control-allow-origin" not in status.headers
        anonymous = httpx2.get(f"{info['base_url']}/v1/status", timeout=10)
        assert anonymous.status_code == 401 and anonymous.json() == {
            "schema_version": 1,
            "error": "missing or wrong bearer token",
        }
        mcp_token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        assert get(local, "/v1/status", bearer=mcp_token).status_code == 401, (
            "the MCP token is not the bearer"
        )

        # The bearer survives a restart (an open viewer keeps working) until rotated.
        local.run("local", "stop")
        local.run("local", "start", str(tmp_path))
        assert observer(local)[1] == bearer
        local.run("local", "setup", "--rotate-observability-bearer")
        rotated = bearer_file.read_text().strip()
        assert rotated != bearer and len(rotated) >= 32
        assert get(local, "/v1/status", bearer=bearer).status_code == 401
        assert get(local, "/v1/status", bearer=rotated).status_code == 200


async def test_a_command_streams_live_events_in_order(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        base, bearer = observer(local)
        async with sse(base, bearer) as stream, connected(local) as mcp:
            # Output arrives while the call is still waiting for the command: it is tied
            # to the call before the call returns a handle.
            gate = Gate.make(tmp_path)
            calling = asyncio.create_task(
                call(
                    mcp,
                    "conv-live",
                    "exec_command",
                    cmd=f"echo first; {gate.wait}; echo second",
                    workdir=str(tmp_path),
                    yield_time_ms=60000,
                )
            )
            await stream.until(lambda e: e["event_type"] == "output" and "first" in e["payload"]["text"])
            assert not calling.done(), "the output streamed while the call waited for the command"
            await gate.release()
            ran = await calling
            assert not ran.is_error and ran.structured_content["status"] == "exited"
            done = await command_settled(stream)
            presentation = done["presentation_id"]
        sequences = [e["sequence"] for e in stream.events]
        assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
        agent = done["agent_id"]
        assert of_type(stream, "agent_first_seen")[0]["payload"]["agent_id"] == agent
        started = of_type(stream, "invocation_started", presentation)[0]
        assert started["payload"]["tool_name"] == "exec_command" and started["payload"]["status"] == "pending"
        process = of_type(stream, "process_started", presentation)[0]
        first_output = next(
            e for e in of_type(stream, "output", presentation) if "first" in e["payload"]["text"]
        )
        ended = of_type(stream, "process_ended", presentation)[0]
        complete = of_type(stream, "output_complete", presentation)[0]
        assert started["sequence"] < process["sequence"] < first_output["sequence"] < ended["sequence"]
        assert first_output["sequence"] < done["sequence"], "output streamed before the call returned"
        assert first_output["agent_id"] == agent and first_output["payload"]["display_text"].startswith(
            "first"
        )
        assert ended["payload"]["exit_code"] == 0 and complete["payload"]["complete"] is True
        text = "".join(e["payload"]["text"] for e in of_type(stream, "output", presentation))
        assert "first" in text and "second" in text
        record = of_type(stream, "presentation_updated", presentation)[-1]["payload"]
        assert record["kind"] == "command" and record["exit_code"] == 0 and "second" in record["output_tail"]
        assert record == get(local, f"/v1/timeline/{presentation}").json(), "an event is the API's own record"


async def test_polls_fold_and_patches_show_as_file_changes(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        base, bearer = observer(local)
        async with sse(base, bearer, "?include_output=false") as stream, connected(local) as mcp:
            gate = Gate.make(tmp_path)
            ran = await call(
                mcp,
                "conv-fold",
                "exec_command",
                cmd=f"{gate.wait}; echo done",
                workdir=str(tmp_path),
                yield_time_ms=100,
            )
            handle = ran.structured_content["session_handle"]
            await gate.release()
            while True:
                polled = await call(
                    mcp, "conv-fold", "write_stdin", session_handle=handle, yield_time_ms=2000
                )
                if polled.structured_content["status"] == "exited":
                    break
            patch = "*** Begin Patch\n*** Add File: notes.txt\n+hello\n+world\n*** End Patch\n"
            patched = await call(mcp, "conv-fold", "apply_patch", patch=patch, workdir=str(tmp_path))
            assert not patched.is_error
            await stream.until(
                lambda e: e["event_type"] == "invocation_completed" and "apply_patch" in str(e)
            )
        assert not of_type(stream, "output")
        records = get(local, "/v1/timeline").json()["records"]
        assert [r["kind"] for r in records] == ["file_changes", "command"]
        command = records[1]
        assert (
            command["poll_count"] >= 1 and command["status"] == "exited" and "done" in command["output_tail"]
        )
        polls = [
            e for e in of_type(stream, "invocation_started") if e["payload"]["tool_name"] == "write_stdin"
        ]
        assert polls and all(e["presentation_id"] == command["presentation_id"] for e in polls)
        files = records[0]["files"]
        assert files[0]["operation"] == "created" and files[0]["path"].endswith("notes.txt")
        assert "+hello" in files[0]["diff"]


async def test_recovery_returns_what_changed_while_away(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        base, bearer = observer(local)
        async with sse(base, bearer) as stream, connected(local) as mcp:
            await call(mcp, "conv-r", "exec_command", cmd="echo old", workdir=str(tmp_path))
            await command_settled(stream)  # its record changes no more
            since = get(local, "/v1/timeline").json()["records"][0]["updated_at_ms"] + 1
            await wait_for(lambda: time.time() * 1000 >= since, what="the clock to pass the old record")
            await call(mcp, "conv-r", "exec_command", cmd="echo new", workdir=str(tmp_path))
        changed = get(local, f"/v1/timeline?recovery_since_ms={since}").json()
        assert [r["command"] for r in changed["records"]] == ["echo new"]
        assert get(local, f"/v1/timeline?recovery_since_ms={since}&before_ms=1").status_code == 400
        everything = get(local, "/v1/timeline?recovery_since_ms=0").json()["records"]
        assert [r["command"] for r in everything] == ["echo new", "echo old"]


async def test_alias_edits_reach_viewers_and_the_model_side_agrees(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        base, bearer = observer(local)
        async with connected(local) as mcp:
            named = await call(mcp, "conv-alias", "set_agent_alias", alias="From the model")
            agent = named.structured_content["agent_id"]
            async with sse(base, bearer, f"?agent_id={agent}") as stream:
                reply = httpx2.put(
                    f"{base}/v1/agents/{agent}/alias",
                    json={"alias": "From the board"},
                    headers={"Authorization": f"Bearer {bearer}"},
                    timeout=10,
                )
                assert reply.status_code == 200 and reply.json()["alias"] == "From the board"
                pushed = await stream.until(lambda e: e["event_type"] == "agent_updated")
                assert pushed["payload"]["alias"] == "From the board"
                await call(mcp, "conv-alias", "set_agent_alias", alias="Model again")
                pushed = await stream.until(
                    lambda e: e["event_type"] == "agent_updated" and e["payload"]["alias"] == "Model again"
                )
        assert get(local, f"/v1/agents/{agent}").json()["alias"] == "Model again", "last write wins"


async def test_no_secret_appears_in_any_response(tmp_path: Path) -> None:
    conversation = "provider-session-key-" + "s" * 24
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        base, bearer = observer(local)
        mcp_token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        async with sse(base, bearer) as stream, connected(local) as mcp:
            ran = await call(mcp, conversation, "exec_command", cmd="echo visible", workdir=str(tmp_path))
            inv_done = await stream.until(lambda e: e["event_type"] == "invocation_completed")
            if not of_type(stream, "output_complete"):
                await stream.until(lambda e: e["event_type"] == "output_complete")
        assert not ran.is_error
        inv = inv_done["payload"]["id"]
        agent = inv_done["agent_id"]
        bodies = [str(stream.events)]
        for path in (
            "/v1/status",
            "/v1/agents",
            f"/v1/agents/{agent}",
            "/v1/timeline",
            f"/v1/timeline/{inv}",
            "/v1/invocations",
            f"/v1/invocations/{inv}",
            f"/v1/invocations/{inv}/output",
        ):
            reply = get(local, path)
            assert reply.status_code == 200, path
            bodies.append(reply.text + str(reply.headers))
        everything = "\n".join(bodies)
        assert "visible" in everything
        for secret in (bearer, mcp_token, conversation):
            assert secret not in everything
        assert os.environ.get("ZODEX_LOCAL_TOKEN", "unset") not in everything
