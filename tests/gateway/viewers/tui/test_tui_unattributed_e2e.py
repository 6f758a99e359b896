"""`zodex local watch --tui` on a real runtime shows calls with no agent in its default view,
labelled "Unattributed": those made before it opened, and those made while it watches."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.gateway.viewers.tui.pty_screen import PtyScreen
from tests.gateway.viewers.tui.test_tui_e2e import call, timeline_rows
from tests.support.local import ZODEX, connected, local_env
from tests.support.unattributed import unattributed_call

pytestmark = pytest.mark.timeout(90)


async def test_unattributed_calls_show_in_the_default_view(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        await unattributed_call(local, "exec_command", cmd="echo anon-before", workdir=str(tmp_path))
        argv = [ZODEX, "local", "watch", "--tui"]
        with PtyScreen(argv, env=local.env(), cwd=str(local.root), cols=120, rows=40) as screen:
            wait = asyncio.to_thread
            # No agent at all: the calls with no agent are what is shown, not "No agents yet".
            text = await wait(
                screen.wait_for, lambda t: "● live" in t and "$ echo anon-before" in t, "the call"
            )
            assert "·  Unattributed  ·  1 record" in text, text
            assert "No agents yet" not in text
            assert "calls from clients with no session" in text, "the picker names the entry"

            ran = await unattributed_call(local, "exec_command", cmd="echo anon-live", workdir=str(tmp_path))
            assert ran["exit_code"] == 0
            text = await wait(
                screen.wait_for,
                lambda t: any("anon-live" in row and "exit 0" in row for row in timeline_rows(t)),
                "the call made while watching",
            )
            assert "·  Unattributed  ·  2 records" in text, text
            screen.send("q")
            assert await wait(screen.wait_exit, 10) == 0

        # An agent's call is newer now: it is the default view, and the unattributed calls
        # stay one entry away in the picker, and in --all.
        async with connected(local) as mcp:
            agent_id = (await call(mcp, "set_agent_alias", alias="named"))["agent_id"]
            await call(mcp, "exec_command", cmd="echo from-agent", workdir=str(tmp_path))
        with PtyScreen(argv, env=local.env(), cwd=str(local.root), cols=120, rows=40) as screen:
            text = await asyncio.to_thread(screen.wait_text, "$ echo from-agent")
            assert f"agent {agent_id} named" in text and "anon-before" not in text
            assert "Unattributed" in text, "the picker still lists the calls with no agent"
            screen.send("q")
            assert await asyncio.to_thread(screen.wait_exit, 10) == 0
        argv = [ZODEX, "local", "watch", "--tui", "--agent", "none"]
        with PtyScreen(argv, env=local.env(), cwd=str(local.root), cols=120, rows=40) as screen:
            text = await asyncio.to_thread(
                screen.wait_for, lambda t: "anon-before" in t and "anon-live" in t, "--agent none"
            )
            assert "·  Unattributed  ·  2 records" in text and "from-agent" not in text
            screen.send("q")
            assert await asyncio.to_thread(screen.wait_exit, 10) == 0
