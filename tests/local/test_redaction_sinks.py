"""One redaction rule at every sink (docs/security.md#redaction): a secret printed with an
escape sequence, a control or a bidi character between its halves is redacted in every
cleaned view (the display view of an output, a record's ``output_tail``, live
``display_text``), which join its halves; a workdir named after a secret is redacted in
``process_started`` and history; an alias set through the observer API is stored redacted;
a tunnel's long line is redacted before it is cut into pieces for the log."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx2
import pytest

from tests.local.test_agents_and_history import call
from tests.local.test_redaction_runtime import observer_json, output_text, stored_bytes
from tests.support.local import connected, local_env, observer_bearer
from tests.support.sse import sse
from tests.support.waiting import wait_until
from zodex_gateway.local.tunnel import LOG_LINE_BYTES
from zodex_gateway.redaction import REDACTED

pytestmark = pytest.mark.timeout(120)

# What the cleaner removes between the token's two halves: an SGR sequence, a C0 control,
# a bidi override (as UTF-8 bytes, so printf writes it whatever the locale).
SEPARATORS = ("\\033[1m", "\\001", "\\342\\200\\256")


async def test_a_secret_split_by_what_cleaning_removes_is_redacted_in_every_cleaned_view(
    tmp_path: Path,
) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        token_file = discovery["mcp"]["token_path"]
        token = Path(token_file).read_text().strip()
        base = discovery["observability"]["base_url"]
        commands = [
            f'T=$(cat {token_file}); printf "%s{sep}%s\\n" "${{T:0:20}}" "${{T:20}}"' for sep in SEPARATORS
        ]
        # The separator and the second half in a later output event than the first half.
        commands.append(
            f'T=$(cat {token_file}); printf "%s\\033[0m" "${{T:0:20}}"; sleep 0.3; printf "%s\\n" "${{T:20}}"'
        )
        async with sse(base, observer_bearer(local)) as stream, connected(local) as mcp:
            for cmd in commands:
                ran = await call(mcp, "conv-s", "exec_command", cmd=cmd, workdir=str(tmp_path))
                # The model reads the cleaned output: the token whole, as the command printed it.
                assert output_text(ran).strip() == token
            if len(stream.of_type("output_complete")) < len(commands):
                await stream.until(lambda _e: len(stream.of_type("output_complete")) >= len(commands))
        records = observer_json(local, "/v1/timeline?limit=100")["records"]
        tails = [r["output_tail"] for r in records if r["kind"] == "command"]
        invocations = observer_json(local, "/v1/invocations?limit=100")["invocations"]
        displays = [
            observer_json(local, f"/v1/invocations/{inv['id']}/output?view=display")["text"]
            for inv in invocations
            if inv["tool_name"] == "exec_command"
        ]
        live = "".join(e["payload"]["display_text"] for e in stream.of_type("output"))
        live_records = [
            e["payload"]["output_tail"]
            for e in stream.of_type("presentation_updated")
            if e["payload"]["kind"] == "command"
        ]
        assert len(tails) == len(displays) == len(commands)
        for where, texts in (
            ("output?view=display", displays),
            ("timeline output_tail", tails),
            ("live display_text", [live]),
            ("live records' output_tail", live_records),
        ):
            assert token not in "\n".join(texts), f"the token whole in {where}"
        for where, text in (("timeline output_tail", "".join(tails)), ("live display_text", live)):
            assert text.count(REDACTED) == len(commands), where
        for display in displays:
            assert display == f"{REDACTED}\n"  # nothing of the token is left around the mark
        # The raw views keep what the cleaner would remove; the token is not in them whole.
        raw = [
            observer_json(local, f"/v1/invocations/{inv['id']}/output?view=raw")["text"]
            for inv in invocations
            if inv["tool_name"] == "exec_command"
        ]
        assert all(token[:20] in text and token not in text for text in raw)


async def test_a_workdir_named_after_a_secret_is_redacted_in_process_events_and_history(
    tmp_path: Path,
) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        workdir = tmp_path / f"w{token}"
        workdir.mkdir()
        async with sse(discovery["observability"]["base_url"], observer_bearer(local)) as stream:
            async with connected(local) as mcp:
                ran = await call(mcp, "conv-w", "exec_command", cmd="pwd", workdir=str(workdir))
                assert output_text(ran).strip() == str(workdir)  # the model's own result
            started = await stream.until(lambda e: e["event_type"] == "process_started")
            await stream.until(lambda e: e["event_type"] == "output_complete")
        assert started["payload"]["cwd"] == str(tmp_path / f"w{REDACTED}")
        raw_history = local.run("local", "history", "--raw", "--format", "json").stdout
        timeline = json.dumps(observer_json(local, "/v1/timeline?limit=100"))
        live = json.dumps(stream.events)
        local.run("local", "stop")
        for where, text in (("live events", live), ("history --raw", raw_history), ("timeline", timeline)):
            assert token not in text, f"the token in {where}"
        assert token.encode() not in stored_bytes(local), "the token in the history database"


async def test_an_alias_set_through_the_observer_api_is_stored_redacted(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        async with connected(local) as mcp:
            labelled = await call(mcp, "conv-a", "set_agent_alias", alias="first label")
        agent_id = labelled.structured_content["agent_id"]
        reply = httpx2.put(
            f"{discovery['observability']['base_url']}/v1/agents/{agent_id}/alias",
            json={"alias": f"k {token}"},
            headers={"Authorization": f"Bearer {observer_bearer(local)}"},
            timeout=10,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["alias"] == f"k {REDACTED}"
        agents = observer_json(local, "/v1/agents")["agents"]
        assert [a["alias"] for a in agents if a["agent_id"] == agent_id] == [f"k {REDACTED}"]
        local.run("local", "stop")
        assert token.encode() not in stored_bytes(local)


def test_a_tunnel_line_longer_than_a_log_piece_is_redacted_across_the_cut(tmp_path: Path) -> None:
    with local_env() as local:
        # The token starts 12 bytes before the end of the first 64 KiB piece.
        pad = LOG_LINE_BYTES - 12
        script = local.root / "long-line-tunnel.sh"
        script.write_text(
            f'#!/bin/sh\nhead -c {pad} /dev/zero | tr "\\0" x; echo "$ZODEX_MCP_TOKEN done"\nexec sleep 300\n'
        )
        script.chmod(0o755)
        local.run("local", "setup", "--tunnel-command", str(script))
        local.run("local", "start", str(tmp_path))
        token = Path(local.discovery()["mcp"]["token_path"]).read_text().strip()
        log_file = local.root / "state" / "zodex" / "local" / "logs" / "runtime.log"
        wait_until(lambda: " done" in log_file.read_text(), what="the end of the tunnel's line in the log")
        local.run("local", "stop")
        pieces = re.findall(r"zodex\.tunnel INFO (.*)", log_file.read_text())
        joined = "".join(pieces)
        assert len(pieces) >= 2, "the line was logged in pieces"
        assert token not in joined
        assert joined == "x" * pad + f"{REDACTED} done"
