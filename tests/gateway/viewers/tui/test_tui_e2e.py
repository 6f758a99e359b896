"""`zodex local watch --tui` for real: a started runtime, real MCP calls over HTTP, and the
viewer in a pseudo-terminal whose screen is read through pyte."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.viewers.tui.pty_screen import ENTER, ESC, PtyScreen
from tests.support.gate import Gate
from tests.support.gateway import Mcp
from tests.support.local import ZODEX, connected, local_env

pytestmark = pytest.mark.timeout(90)

CONVERSATION = "conv-tui"


async def call(mcp: Mcp, tool: str, conversation: str = CONVERSATION, **args: Any) -> dict[str, Any]:
    result = await mcp.client.call_tool(tool, args, meta={"openai/session": conversation})
    assert not result.is_error, result.content[0].text
    return dict(result.structured_content or {})  # apply_patch answers in text only


def cursor_line(text: str) -> str:
    """The timeline row marked ``▸`` (the picker has no such mark)."""
    rows = [line for line in text.split("\n") if "▸ " in line]
    assert len(rows) == 1, text
    return rows[0]


def timeline_rows(text: str) -> list[str]:
    # The picker is the left column; its border ``▕`` separates it from the timeline.
    return [line.split("▕", 1)[1].strip() for line in text.split("\n") if "▕" in line]


def shows_cwd(row: str, path: Path) -> bool:
    """The row starts ``cwd <path>``, or as much of it as fits before the column's ``…``
    (a long temporary directory does not fit in 120 columns)."""
    full = f"cwd {path}"
    return row.startswith(full) or (
        row.endswith("…") and len(row) > len("cwd /…") and full.startswith(row[:-1])
    )


def raw_view_of_first_command(text: str) -> bool:
    """The raw view shows the invocation's JSON, its arguments, and a title naming its id."""
    ids = re.findall(r'"id": "(\w+)"', text)
    return (
        len(ids) == 1
        and f"invocation {ids[0]}" in text
        and '"tool_name": "exec_command"' in text
        and '"cmd": "echo first-marker; exit 3"' in text
    )


async def test_watch_tui_follows_a_real_runtime(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            agent_id = (await call(mcp, "set_agent_alias", alias="tui-e2e"))["agent_id"]
            await call(mcp, "exec_command", cmd="echo first-marker; exit 3", workdir=str(tmp_path))
            patch = "*** Begin Patch\n*** Add File: notes.txt\n+hello notes\n*** End Patch\n"
            await call(mcp, "apply_patch", patch=patch, workdir=str(tmp_path))

            argv = [ZODEX, "local", "watch", "--tui"]
            with PtyScreen(argv, env=local.env(), cwd=str(local.root), cols=120, rows=40) as screen:
                wait = asyncio.to_thread
                text = await wait(
                    screen.wait_for, lambda t: "● live" in t and "notes.txt" in t, "the timeline"
                )
                assert f"agent {agent_id} tui-e2e" in text, "the only agent is chosen, with its alias"
                assert "$ echo first-marker; exit 3" in text and "exit 3" in text
                assert "Added notes.txt +1 −0" in text
                assert "notes.txt" in cursor_line(text), "the cursor starts on the newest record"

                screen.send("j")
                await wait(screen.wait_for, lambda t: "first-marker" in cursor_line(t), "j to move down")
                screen.send("k")
                await wait(screen.wait_for, lambda t: "notes.txt" in cursor_line(t), "k to move up")
                screen.send("G")
                await wait(screen.wait_for, lambda t: "first-marker" in cursor_line(t), "G to the bottom")

                screen.send(ENTER)
                text = await wait(screen.wait_for, lambda t: "first-marker" in timeline_rows(t), "output")
                assert any(shows_cwd(row, tmp_path) for row in timeline_rows(text)), text
                screen.send(ENTER)
                await wait(screen.wait_for, lambda t: "first-marker" not in timeline_rows(t), "collapse")

                screen.send("r")
                # The modal is drawn line by line: wait for every line the check needs, not the
                # first one, or the command's line may not be on the screen yet.
                await wait(screen.wait_for, raw_view_of_first_command, "the raw view of the command")
                screen.send(ESC)
                await wait(screen.wait_gone, '"tool_name"')

                screen.send("/")
                screen.send("notes")
                text = await wait(
                    screen.wait_for, lambda t: "1 record" in t and "first-marker" not in t, "search"
                )
                assert "Added notes.txt" in text
                screen.send(ESC)
                await wait(
                    screen.wait_for, lambda t: "first-marker" in t and "notes.txt" in t, "search cleared"
                )

                # Started after the viewer opened: it appears running, then its end arrives
                # as an event (nobody polls it).
                gate = Gate.make(tmp_path, "g")
                started = await call(
                    mcp,
                    "exec_command",
                    cmd=f"{gate.wait_from(tmp_path)}; echo live-end",
                    workdir=str(tmp_path),
                    yield_time_ms=200,
                )
                assert started["status"] == "running"
                await wait(screen.wait_for, lambda t: "live-end" in t and "running" in t, "the new command")
                await gate.release()
                await wait(
                    screen.wait_for,
                    lambda t: any("live-end" in row and "exit 0" in row for row in timeline_rows(t)),
                    "its exit",
                )

                screen.send("q")
                assert await wait(screen.wait_exit, 10) == 0


async def test_watch_tui_agent_picker(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            ids = {}
            for name in ("first", "second"):
                ids[name] = (await call(mcp, "set_agent_alias", name, alias=f"{name}-agent"))["agent_id"]
                await call(mcp, "exec_command", name, cmd=f"echo from-{name}", workdir=str(tmp_path))

        argv = [ZODEX, "local", "watch", "--tui", "--agent", ids["first"]]
        with PtyScreen(argv, env=local.env(), cwd=str(local.root)) as screen:
            wait = asyncio.to_thread
            text = await wait(screen.wait_text, "$ echo from-first")
            assert f"agent {ids['first']} first-agent" in text and "from-second" not in text
            assert "second-agent" in text, "the picker lists every agent"

            screen.send("\t")  # Tab: to the picker; k/j move it and the timeline follows
            screen.send("k")
            text = await wait(screen.wait_text, "$ echo from-second")
            assert f"agent {ids['second']} second-agent" in text and "from-first" not in text
            screen.send("g")  # the top entry: every agent, interleaved, each row naming its agent
            text = await wait(screen.wait_for, lambda t: "from-first" in t and "from-second" in t, "all")
            assert "all agents" in text
            rows = timeline_rows(text)
            assert any(ids["first"] in row and "from-first" in row for row in rows), text
            assert any(ids["second"] in row and "from-second" in row for row in rows), text

            screen.send("a")  # the picker had focus: a hides it
            await wait(screen.wait_gone, "second-agent")
            screen.send("a")
            await wait(screen.wait_text, "second-agent")
            screen.send("q")
            assert await wait(screen.wait_exit, 10) == 0

        argv = [ZODEX, "local", "watch", "--tui", "--all"]
        with PtyScreen(argv, env=local.env(), cwd=str(local.root)) as screen:
            text = await asyncio.to_thread(
                screen.wait_for, lambda t: "from-first" in t and "from-second" in t, "--all"
            )
            assert "all agents" in text
            screen.send("q")
            assert await asyncio.to_thread(screen.wait_exit, 10) == 0


async def test_watch_tui_follows_a_runtime_restart(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            await call(mcp, "exec_command", cmd="echo before-restart", workdir=str(tmp_path))
        with PtyScreen([ZODEX, "local", "watch", "--tui"], env=local.env(), cwd=str(local.root)) as screen:
            wait = asyncio.to_thread
            await wait(screen.wait_for, lambda t: "before-restart" in t and "● live" in t, "the timeline")
            await wait(local.run, "local", "stop")
            await wait(screen.wait_text, "reconnecting")
            await wait(local.run, "local", "start", str(tmp_path))
            # The new runtime listens on another port: the viewer finds it through discovery.
            async with connected(local) as mcp:
                await call(mcp, "exec_command", cmd="echo after-restart", workdir=str(tmp_path))
            # The title and the timeline are drawn separately: wait until the screen shows both.
            title = f"runtime {local.discovery()['runtime_id']}"
            text = await wait(
                screen.wait_for,
                lambda t: "after-restart" in t and "● live" in t and title in t,
                "the new runtime's records under a title naming it",
                30,
            )
            assert "before-restart" in text
            screen.send("q")
            assert await wait(screen.wait_exit, 10) == 0
