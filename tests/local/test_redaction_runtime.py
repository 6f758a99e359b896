"""A command that prints the runtime's secrets (the MCP token, the observer bearer) does not
hand them to a viewer: history, the observer API, its live events and the runtime log hold
``[redacted: zodex secret]`` instead, even for a secret split across output events or
results, while the model's own results keep what the command printed
(docs/security.md#redaction)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import zstandard

from tests.local.test_agents_and_history import call
from tests.support.gate import Gate
from tests.support.local import LocalEnv, connected, local_env, observer_bearer
from tests.support.sse import sse
from tests.support.waiting import wait_until
from zodex_gateway.history.storage import SEGMENTS_DIR
from zodex_gateway.redaction import REDACTED

pytestmark = pytest.mark.timeout(120)


def stored_bytes(local: LocalEnv) -> bytes:
    """Every file history keeps, output segments decompressed (a token would not show in
    their compressed bytes)."""
    history = local.root / "state" / "zodex" / "local" / "history"
    files = b"".join(p.read_bytes() for p in sorted(history.iterdir()) if p.is_file())
    output = b""
    for segment in sorted((history / SEGMENTS_DIR).glob("*.zst")):
        with segment.open("rb") as raw:
            output += zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True).read()
    return files + output


def observer_json(local: LocalEnv, path: str) -> Any:
    base = local.discovery()["observability"]["base_url"]
    reply = httpx2.get(
        f"{base}{path}", headers={"Authorization": f"Bearer {observer_bearer(local)}"}, timeout=10
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def output_text(result: Any) -> str:
    return str(result.structured_content["output"])


async def test_secrets_printed_by_commands_never_reach_history_viewers_or_logs(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        token_file = discovery["mcp"]["token_path"]
        bearer_file = discovery["observability"]["bearer_token_path"]
        token = Path(token_file).read_text().strip()
        old_bearer = observer_bearer(local)
        base = discovery["observability"]["base_url"]
        split = f'T=$(cat {token_file}); printf %s "${{T:0:20}}"; sleep 0.3; printf "%s\\n" "${{T:20}}"'
        async with sse(base, old_bearer) as stream, connected(local) as mcp:
            whole = await call(mcp, "conv-r", "exec_command", cmd=f"cat {token_file}", workdir=str(tmp_path))
            assert output_text(whole).strip() == token, "the model gets what the command printed"
            across_events = await call(mcp, "conv-r", "exec_command", cmd=split, workdir=str(tmp_path))
            assert output_text(across_events).strip() == token
            # Split across two results: the first call returns while the command waits.
            gate = Gate.make(tmp_path)
            held = split.replace("sleep 0.3", gate.wait)
            first = await call(
                mcp, "conv-r", "exec_command", cmd=held, workdir=str(tmp_path), yield_time_ms=300
            )
            handle = first.structured_content["session_handle"]
            await gate.release()
            rest = await call(mcp, "conv-r", "write_stdin", session_handle=handle, yield_time_ms=5000)
            assert (output_text(first) + output_text(rest)).strip() == token
            # The model may write it anywhere, and label itself with it.
            patch = f"*** Begin Patch\n*** Add File: leak.txt\n+{token}\n*** End Patch"
            patched = await call(mcp, "conv-r", "apply_patch", patch=patch, workdir=str(tmp_path))
            assert not patched.is_error and (tmp_path / "leak.txt").read_text() == f"{token}\n"
            labelled = await call(mcp, "conv-r", "set_agent_alias", alias=f"k {token}")
            assert not labelled.is_error
            # The observer bearer is rotated while the runtime runs: old and new are secrets.
            local.run("local", "setup", "--rotate-observability-bearer")
            new_bearer = Path(bearer_file).read_text().strip()
            bearers = await call(
                mcp,
                "conv-r",
                "exec_command",
                cmd=f"cat {bearer_file}; echo {old_bearer}",
                workdir=str(tmp_path),
            )
            assert output_text(bearers).split() == [new_bearer, old_bearer]
            # Four commands ran; each one's output is stored before its end is published.
            if len(stream.of_type("output_complete")) < 4:
                await stream.until(lambda _e: len(stream.of_type("output_complete")) >= 4)
        secrets = [token, old_bearer, new_bearer]
        live = json.dumps(stream.events)
        raw_history = local.run("local", "history", "--raw", "--format", "json").stdout
        timeline = json.dumps(observer_json(local, "/v1/timeline?limit=100"))
        invocations = observer_json(local, "/v1/invocations?limit=100")["invocations"]
        details, outputs = [], []
        for inv in invocations:
            details.append(json.dumps(observer_json(local, f"/v1/invocations/{inv['id']}")))
            if inv["tool_name"] == "exec_command":
                for view in ("raw", "display"):
                    outputs.append(
                        observer_json(local, f"/v1/invocations/{inv['id']}/output?view={view}")["text"]
                    )
        agents = json.dumps(observer_json(local, "/v1/agents"))
        local.run("local", "stop")
        log = (local.root / "state" / "zodex" / "local" / "logs" / "runtime.log").read_text()
        stored = stored_bytes(local)
        for secret in secrets:
            for where, text in (
                ("live events", live),
                ("history --raw", raw_history),
                ("timeline", timeline),
                ("invocation details", "".join(details)),
                ("invocation output", "".join(outputs)),
                ("agents", agents),
                ("runtime.log", log),
            ):
                assert secret not in text, f"a secret in {where}"
            assert secret.encode() not in stored, "a secret in the history database"
        # What was there is marked, in stored output and in the live stream.
        assert sum(text.count(REDACTED) for text in outputs) >= 2 * 5
        # The worker sent the token in two events (the first one, all of it the start of the
        # token, was held back and let go, redacted, with the second).
        assert max(e["payload"]["seq"] or 0 for e in stream.of_type("output")) >= 2
        live_output = "".join(e["payload"]["text"] for e in stream.of_type("output"))
        assert live_output.count(REDACTED) >= 5
        assert f"k {REDACTED}" in agents


def test_a_tunnel_that_logs_the_token_leaves_it_out_of_the_runtime_log(tmp_path: Path) -> None:
    with local_env() as local:
        script = local.root / "chatty-tunnel.sh"
        script.write_text(
            '#!/bin/sh\necho "forwarding with X-Zodex-Local-Token: $ZODEX_MCP_TOKEN"\nexec sleep 300\n'
        )
        script.chmod(0o755)
        local.run("local", "setup", "--tunnel-command", str(script))
        local.run("local", "start", str(tmp_path))
        token = Path(local.discovery()["mcp"]["token_path"]).read_text().strip()
        log_file = local.root / "state" / "zodex" / "local" / "logs" / "runtime.log"
        wait_until(lambda: "forwarding with" in log_file.read_text(), what="the tunnel's line in the log")
        local.run("local", "stop")
        log = log_file.read_text()
        assert token not in log
        assert f"zodex.tunnel INFO forwarding with X-Zodex-Local-Token: {REDACTED}" in log
