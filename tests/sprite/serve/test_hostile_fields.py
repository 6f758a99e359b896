"""A real ``zodex sprite serve`` against a hostile agent and client: a workdir's name cannot
forge a line of the log or reach the operator's terminal raw, the log rotates at
``log.max-size``, two keys in two ``Authorization`` headers are refused, and something the
agent plants in the registry is a tool error in the project's words."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sprite.serve.sprite_support import Sprite, sprite_setup, tool_json
from tests.support.accounts import require_root
from tests.support.waiting import wait_until
from zodex_protocol.handles import worker_id_for

LOG_MAX_BYTES = 64 * 1024
FORGED_LINE = "2026-12-01 00:00:00,000 zodex.sprite INFO stopped"
# A newline and a forged record, a carriage return, an erase-screen sequence, a C1 control,
# a line separator and a bidi override: a directory may be named with any of them.
HOSTILE_NAME = f"inj\n{FORGED_LINE}\n\r\x1b[2J\x85\u2028\u202eevil"


@pytest.fixture(scope="module")
def sprite() -> Iterator[Sprite]:
    require_root()
    with sprite_setup(tables={"log": {"max-size": "64KiB", "keep": "2"}}) as running:
        yield running


def agent_dir(sprite: Sprite, *parts: str) -> Path:
    path = sprite.workspace.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    for made in [path, *path.parents]:
        if made == sprite.workspace:
            break
        os.chown(made, sprite.agent.uid, sprite.agent.gid)
    return path


def all_logs(sprite: Sprite) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(sprite.log_file.parent.glob("sprite.log*")))


async def test_a_workdir_name_forges_no_line_and_no_escape(sprite: Sprite) -> None:
    workdir = agent_dir(sprite, HOSTILE_NAME)
    async with sprite.mcp() as mcp:
        ran = tool_json(await mcp.call_tool("exec_command", {"cmd": "echo ran", "workdir": str(workdir)}))
    assert ran["output"] == "ran\n"
    escaped = "inj\\n2026-12-01 00:00:00,000 zodex.sprite INFO stopped\\n\\r\\x1b[2J\\x85\\u2028\\u202eevil"
    wait_until(
        lambda: f"{escaped} started".encode() in all_logs(sprite), what="the worker's start in the log"
    )
    raw = all_logs(sprite)
    text = raw.decode("utf-8")
    for line in text.splitlines():
        assert not line.startswith(FORGED_LINE), "a forged record"
        assert all(ch.isprintable() for ch in line), repr(line)
    for hostile in ("\x1b", "\r", "\x85", "\u2028", "\u202e"):
        assert hostile not in text
    shown = subprocess.run(
        [str(sprite.python), "-c", "import sys; from zodex_gateway.cli import main; sys.argv[0] = 'zodex'; main()",
         "sprite", "logs", "--lines", "500", "--config", str(sprite.config)],
        capture_output=True, text=True, encoding="utf-8", timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert escaped in shown.stdout
    assert all(ch.isprintable() for ch in shown.stdout.replace("\n", ""))


async def test_the_log_rotates_at_log_max_size(sprite: Sprite) -> None:
    """Twenty workdirs with 3,800-character names: each worker start writes a line that long."""
    long_name = ["d" * 250] * 15
    async with sprite.mcp() as mcp:
        for n in range(20):
            workdir = agent_dir(sprite, *long_name, f"w{n}")
            tool_json(await mcp.call_tool("exec_command", {"cmd": "true", "workdir": str(workdir)}))
    rotated = sprite.log_file.with_name("sprite.log.1")
    wait_until(rotated.exists, what="sprite.log to be rotated")
    for path in sprite.log_file.parent.glob("sprite.log*"):
        assert path.stat().st_size <= LOG_MAX_BYTES + 8 * 1024, path  # at most one line over
    assert not sprite.log_file.with_name("sprite.log.3").exists(), "log.keep = 2"


def test_two_authorization_headers_with_two_keys_are_refused(sprite: Sprite) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = ("Accept", "application/json, text/event-stream")
    wrong = sprite.key[:-1] + ("A" if sprite.key[-1] != "A" else "B")
    with sprite.client() as http:
        for first, second in ((wrong, sprite.key), (sprite.key, wrong)):
            headers = [accept, ("Authorization", f"Bearer {first}"), ("Authorization", f"Bearer {second}")]
            answer = http.post("/mcp", json=initialize, headers=headers)
            assert (answer.status_code, answer.content) == (401, b"")
        other_scheme = [accept, ("Authorization", f"Basic {wrong}")]
        answer = http.post("/mcp", json=initialize, headers=other_scheme, params={"key": sprite.key})
        assert (answer.status_code, answer.content) == (401, b"")
        same_twice = [
            accept,
            ("Authorization", f"Bearer {sprite.key}"),
            ("Authorization", f"Bearer {sprite.key}"),
        ]
        assert http.post("/mcp", json=initialize, headers=same_twice).status_code == 200


async def test_a_directory_planted_as_a_started_record_is_a_tool_error(sprite: Sprite) -> None:
    workdir = agent_dir(sprite, "planted")
    registry = sprite.runtime_dir / "runtime" / "w"
    planted = registry / f"{worker_id_for(str(workdir))}-1.started"
    planted.mkdir()
    (planted / "inside").write_text("the agent's")
    os.chown(planted / "inside", sprite.agent.uid, sprite.agent.gid)
    os.chown(planted, sprite.agent.uid, sprite.agent.gid)
    planted.chmod(0o700)  # the service cannot empty it
    try:
        async with sprite.mcp() as mcp:
            refused = await mcp.call_tool("exec_command", {"cmd": "echo ran", "workdir": str(workdir)})
            assert refused.is_error
            assert refused.content[0].text == (
                f"could not start a worker for {workdir}: {planted} is in the way and cannot be removed; "
                "remove it, then retry"
            )
            shutil.rmtree(planted)
            ran = tool_json(await mcp.call_tool("exec_command", {"cmd": "echo ran", "workdir": str(workdir)}))
            assert ran["output"] == "ran\n"
    finally:
        shutil.rmtree(planted, ignore_errors=True)


async def test_an_empty_directory_planted_as_a_started_record_is_removed(sprite: Sprite) -> None:
    workdir = agent_dir(sprite, "planted-empty")
    planted = sprite.runtime_dir / "runtime" / "w" / f"{worker_id_for(str(workdir))}-1.started"
    planted.mkdir()
    os.chown(planted, sprite.agent.uid, sprite.agent.gid)
    async with sprite.mcp() as mcp:
        ran = tool_json(await mcp.call_tool("exec_command", {"cmd": "echo ran", "workdir": str(workdir)}))
    assert ran["output"] == "ran\n"
    assert planted.is_file()


async def test_no_command_gains_a_privilege_through_a_setuid_program(sprite: Sprite) -> None:
    """The service here runs without systemd's NoNewPrivileges: the root helper sets
    no_new_privs itself, so a setuid-root program runs with the agent's uid."""
    setuid_id = sprite.base / "setuid-id"
    shutil.copy("/usr/bin/id", setuid_id)
    os.chown(setuid_id, 0, 0)
    setuid_id.chmod(0o4755)
    async with sprite.mcp() as mcp:
        shown = tool_json(
            await mcp.call_tool(
                "exec_command",
                {
                    "cmd": f"grep NoNewPrivs /proc/self/status; {setuid_id} -u",
                    "workdir": str(sprite.workspace),
                },
            )
        )
    assert shown["output"].split() == ["NoNewPrivs:", "1", str(sprite.agent.uid)]
