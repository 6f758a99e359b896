"""Liveboard in Chromium on a real runtime: calls from an HTTP client with no session (no
agent) appear live in an "Unattributed" column beside the agents' columns."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.async_api import expect

from tests.gateway.viewers.watch.live_support import call, chromium, watching
from tests.gateway.viewers.watch.test_liveboard_browser import PageLog, cards, column, open_board
from tests.support.gateway import wait_for
from tests.support.local import connected, local_env
from tests.support.slowdown import scaled
from tests.support.unattributed import unattributed_call

pytestmark = pytest.mark.timeout(90)

expect.set_options(timeout=round(scaled(20_000)))


async def test_unattributed_calls_stream_into_their_own_column(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        with watching(local) as watch:
            async with chromium() as browser:
                page = await browser.new_page()
                log = PageLog()
                log.attach(page)
                streams: list[str] = []
                page.on("request", lambda r: streams.append(r.url) if "/api/v1/events" in r.url else None)
                await open_board(page, watch)
                await expect(page.get_by_test_id("empty-board")).to_contain_text("No agents yet")
                await expect(page.get_by_test_id("column")).to_have_count(0)

                # Output that can only reach the page through the event stream: the command
                # prints once the call has returned.
                script = "until [ -e go ]; do sleep 0.05; done; echo anon-tick; read line; echo got $line"
                started = await unattributed_call(
                    local, "exec_command", cmd=script, workdir=str(tmp_path), yield_time_ms=100
                )
                assert started["status"] == "running"
                unattributed = column(page, "none")
                await expect(unattributed).to_be_visible()
                await expect(page.get_by_test_id("column")).to_have_count(1)
                await expect(unattributed.get_by_test_id("agent-id")).to_have_text("Unattributed")
                await expect(unattributed.get_by_test_id("alias-edit")).to_have_count(0)
                card = cards(unattributed, "command", "anon-tick")
                await expect(card).to_have_attribute("data-status", "running")
                await expect(unattributed.get_by_test_id("active-processes")).to_have_attribute(
                    "data-count", "1"
                )
                # Its output is asked for: "none" is among the output_agent_ids.
                await wait_for(
                    lambda: (
                        bool(streams)
                        and parse_qs(urlsplit(streams[-1]).query).get("output_agent_ids") == ["none"]
                    ),
                    what="an event stream with the unattributed calls' output",
                )
                (tmp_path / "go").touch()
                await expect(card.get_by_test_id("output")).to_contain_text("anon-tick")
                await unattributed_call(
                    local,
                    "write_stdin",
                    session_handle=started["session_handle"],
                    chars="yes\n",
                    yield_time_ms=5000,
                )
                await expect(card).to_have_attribute("data-status", "exited")
                await expect(card.get_by_test_id("output")).to_contain_text("got yes")
                await expect(cards(unattributed, "stdin")).to_have_count(1)
                await expect(unattributed.get_by_test_id("active-processes")).to_have_attribute(
                    "data-count", "0"
                )

                # An agent's calls get the agent's own column; the unattributed one stays.
                async with connected(local) as mcp:
                    ran = await call(
                        mcp, "conv-named", "exec_command", cmd="echo named", workdir=str(tmp_path)
                    )
                    agent_id = (await call(mcp, "conv-named", "set_agent_alias", alias="named"))["agent_id"]
                assert ran["exit_code"] == 0
                await expect(page.get_by_test_id("column")).to_have_count(2)
                agent_column = column(page, agent_id)
                await expect(cards(agent_column, "command", "echo named")).to_have_count(1)
                await expect(cards(unattributed, "command", "echo named")).to_have_count(0)
                order = await page.get_by_test_id("column").evaluate_all(
                    "cs => cs.map(c => c.dataset.agentId)"
                )
                assert order == [agent_id, "none"], "the unattributed column comes after the agents'"
                assert log.errors == []

                # A board opened now shows the column from the start, with what happened.
                fresh = await browser.new_page()
                await open_board(fresh, watch)
                again = column(fresh, "none")
                await expect(cards(again, "command", "anon-tick")).to_have_attribute("data-status", "exited")
                await expect(cards(again, "stdin")).to_have_count(1)
                await expect(fresh.get_by_test_id("column")).to_have_count(2)


async def test_no_unattributed_call_no_column(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        async with connected(local) as mcp:
            await call(mcp, "conv-only", "exec_command", cmd="echo only", workdir=str(tmp_path))
        with watching(local) as watch:
            async with chromium() as browser:
                page = await browser.new_page()
                await open_board(page, watch)
                await expect(cards(page.get_by_test_id("column"), "command", "echo only")).to_have_count(1)
                await expect(page.get_by_test_id("column")).to_have_count(1)
                await expect(column(page, "none")).to_have_count(0)
