"""Liveboard in Chromium on a real runtime, fed by a real MCP client: live output, file
cards, aliases across tabs, the bearer nowhere in the page, and screenshots of both themes."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.async_api import Locator, Page, Response, expect

from tests.gateway.viewers.watch.live_support import ARTIFACTS, Watching, call, chromium, watching
from tests.support.gateway import wait_for
from tests.support.local import LocalEnv, connected, local_env, observer_bearer
from tests.support.slowdown import scaled

pytestmark = pytest.mark.timeout(60)

WAIT_MS = round(scaled(20_000))  # generous: the machine is shared; every wait is on a condition
expect.set_options(timeout=WAIT_MS)

# Test instrumentation: keep every event frame the page receives, to search for the bearer.
RECORD_FRAMES = """
(() => {
  const Original = window.EventSource;
  window.__frames = [];
  window.EventSource = class extends Original {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', (m) => window.__frames.push(m.data));
    }
  };
})();
"""


@dataclass
class PageLog:
    responses: list[Response] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.on("response", lambda response: self.responses.append(response))
        page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)


@contextmanager
def running(tmp_path: Path) -> Iterator[tuple[LocalEnv, Watching]]:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        with watching(local) as watch:
            yield local, watch


def column(page: Page, agent_id: str) -> Locator:
    return page.locator(f'[data-testid="column"][data-agent-id="{agent_id}"]')


def cards(scope: Locator, kind: str, text: str | None = None) -> Locator:
    found = scope.locator(f'[data-testid="card"][data-kind="{kind}"]')
    return found.filter(has_text=text) if text is not None else found


def diff_rows(card: Locator, kind: str) -> Locator:
    return card.locator(f'[data-testid="diff-row"][data-kind="{kind}"]')


async def open_board(page: Page, watch: Watching) -> None:
    await page.goto(watch.url)
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")


async def test_command_output_streams_into_its_column(tmp_path: Path) -> None:
    with running(tmp_path) as (local, watch):
        bearer = observer_bearer(local)
        async with connected(local) as mcp, chromium() as browser:
            page = await browser.new_page()
            log = PageLog()
            log.attach(page)
            await page.add_init_script(RECORD_FRAMES)
            await open_board(page, watch)
            await expect(page.get_by_test_id("empty-board")).to_contain_text("No agents yet")
            # The command waits for a file the test makes once the call has returned, so
            # "tick1" can only reach the page through the output stream.
            script = "until [ -e go ]; do sleep 0.05; done; echo tick1; read line; echo tick2 $line"
            started = await call(
                mcp, "conv-stream", "exec_command", cmd=script, workdir=str(tmp_path), yield_time_ms=100
            )
            assert started["status"] == "running" and "tick1" not in started["output"]
            # The agent is new: its column appears by itself.
            board = page.get_by_test_id("column")
            await expect(board).to_have_count(1)
            await expect(board.get_by_test_id("alias")).to_have_text("no alias")
            card = cards(board, "command", "tick1; read line")
            await expect(card).to_have_attribute("data-status", "running")
            await expect(board.get_by_test_id("active-processes")).to_have_attribute("data-count", "1")
            (tmp_path / "go").touch()
            await expect(card.get_by_test_id("output")).to_contain_text("tick1")
            await expect(card).to_have_attribute("data-status", "running")
            await expect(card.get_by_test_id("output")).not_to_contain_text("tick2")

            await call(
                mcp,
                "conv-stream",
                "write_stdin",
                session_handle=started["session_handle"],
                chars="done\n",
                yield_time_ms=5000,
            )
            await expect(card).to_have_attribute("data-status", "exited")
            await expect(card.get_by_test_id("status")).to_have_text("exit 0")
            # The terminal echoes what was typed; nothing streamed is shown twice.
            await expect(card.get_by_test_id("output")).to_have_text("tick1\ndone\ntick2 done\n")
            typed = cards(board, "stdin")
            await expect(typed.get_by_test_id("chars")).to_have_text("done⏎")
            await expect(board.get_by_test_id("active-processes")).to_have_attribute("data-count", "0")
            # Newest on top: the stdin card was made after the command.
            kinds = await board.locator('[data-testid="card"]').evaluate_all(
                "cs => cs.map(c => c.dataset.kind)"
            )
            assert kinds == ["stdin", "command"]

            # The bearer is nowhere the page can see: content, storage, cookies, responses, events.
            assert bearer not in await page.content()
            storage = await page.evaluate("JSON.stringify([Object.entries(localStorage), document.cookie])")
            assert bearer not in storage
            assert await page.context.cookies() == []
            frames = await page.evaluate("window.__frames")
            assert frames and any("tick1" in frame for frame in frames)
            assert bearer not in json.dumps(frames)
            assert log.responses
            for response in log.responses:
                assert bearer not in json.dumps(await response.all_headers()), response.url
                # An event stream's body is read by the page, frame by frame (checked above).
                if not urlsplit(response.url).path.endswith("/api/v1/events"):
                    assert bearer not in await response.text(), response.url
                assert bearer not in response.url
            assert log.errors == []


async def test_apply_patch_shows_a_file_card_with_its_diff(tmp_path: Path) -> None:
    with running(tmp_path) as (local, watch):
        async with connected(local) as mcp, chromium() as browser:
            agent = (await call(mcp, "conv-patch", "set_agent_alias", alias="patcher"))["agent_id"]
            page = await browser.new_page()
            log = PageLog()
            log.attach(page)
            await open_board(page, watch)
            board = column(page, agent)
            await expect(board).to_be_visible()
            added = "*** Begin Patch\n*** Add File: notes.txt\n+hello\n+world\n*** End Patch\n"
            await call(mcp, "conv-patch", "apply_patch", patch=added, workdir=str(tmp_path))
            edited = (
                "*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+there\n*** End Patch\n"
            )
            await call(mcp, "conv-patch", "apply_patch", patch=edited, workdir=str(tmp_path))

            files = cards(board, "file_changes")
            await expect(files).to_have_count(2)
            newest, oldest = files.nth(0), files.nth(1)
            await expect(newest.get_by_test_id("file-op")).to_have_text("Edited")
            await expect(newest.get_by_test_id("file")).to_contain_text("notes.txt")
            # A row reads: old line number, new line number, sign, text.
            await expect(diff_rows(newest, "del")).to_have_text(["2-world"])
            await expect(diff_rows(newest, "add")).to_have_text(["2+there"])
            await expect(diff_rows(newest, "ctx")).to_have_text(["11 hello"])
            await expect(oldest.get_by_test_id("file-op")).to_have_text("Added")
            await expect(diff_rows(oldest, "add")).to_have_text(["1+hello", "2+world"])
            await expect(diff_rows(oldest, "del")).to_have_count(0)
            assert log.errors == []


async def test_alias_edited_in_one_tab_shows_in_another(tmp_path: Path) -> None:
    with running(tmp_path) as (local, watch):
        async with connected(local) as mcp, chromium() as browser:
            ran = await call(mcp, "conv-alias", "exec_command", cmd="true", workdir=str(tmp_path))
            assert ran["exit_code"] == 0
            agent_id = (await call(mcp, "conv-alias", "set_agent_alias", alias="first name"))["agent_id"]
            context = await browser.new_context()
            editor, viewer = await context.new_page(), await context.new_page()
            for page in (editor, viewer):
                await open_board(page, watch)
                await expect(column(page, agent_id).get_by_test_id("alias")).to_have_text("first name")

            await editor.bring_to_front()  # a background tab's animation frames are throttled
            mine = column(editor, agent_id)
            await mine.get_by_test_id("alias-edit").click()
            entry = mine.get_by_test_id("alias-input")
            await expect(entry).to_be_focused()
            await entry.fill("not this")
            await entry.press("Escape")
            await expect(mine.get_by_test_id("alias")).to_have_text("first name")

            await mine.get_by_test_id("alias-edit").click()
            await entry.fill("Reviewer bot")
            await entry.press("Enter")
            await expect(mine.get_by_test_id("alias")).to_have_text("Reviewer bot")
            await expect(column(viewer, agent_id).get_by_test_id("alias")).to_have_text("Reviewer bot")
            await viewer.get_by_test_id("agents-button").click()
            drawer_row = viewer.locator(f'[data-testid="drawer-agent"][data-agent-id="{agent_id}"]')
            await expect(drawer_row).to_contain_text("Reviewer bot")

            await mine.get_by_test_id("alias-edit").click()
            await entry.fill("bad\u0007bell")
            await entry.press("Enter")
            await expect(mine.get_by_test_id("alias-note")).to_contain_text("control")
            await entry.press("Escape")
            history = json.loads(local.run("local", "history", "--format", "json").stdout)
            assert [inv["tool_name"] for inv in history["invocations"]] == ["exec_command"]
            await context.close()


async def test_columns_follow_the_settings_and_theme_persists(tmp_path: Path) -> None:
    with running(tmp_path) as (local, watch):
        async with connected(local) as mcp, chromium() as browser:
            ids = [
                (await call(mcp, f"conv-{n}", "set_agent_alias", alias=f"agent {n}"))["agent_id"]
                for n in range(5)
            ]
            page = await browser.new_page()
            streams: list[str] = []
            page.on("request", lambda r: streams.append(r.url) if "/api/v1/events" in r.url else None)
            await open_board(page, watch)
            await expect(page.get_by_test_id("column")).to_have_count(4)
            await page.get_by_test_id("agents-button").click()
            await expect(page.get_by_test_id("drawer-agent")).to_have_count(5)
            await page.get_by_test_id("column-count").fill("2")
            await page.get_by_test_id("column-count").press("Enter")
            await expect(page.get_by_test_id("column")).to_have_count(2)
            shown = await page.get_by_test_id("column").evaluate_all("cs => cs.map(c => c.dataset.agentId)")
            hidden = next(agent_id for agent_id in ids if agent_id not in shown)
            toggle = page.locator(
                f'[data-testid="drawer-agent"][data-agent-id="{hidden}"] [data-testid="drawer-toggle"]'
            )
            await toggle.check()
            await expect(column(page, hidden)).to_be_visible()
            await expect(page.get_by_test_id("column")).to_have_count(2)
            # Output is streamed only for the agents whose columns are shown.
            shown = await page.get_by_test_id("column").evaluate_all("cs => cs.map(c => c.dataset.agentId)")
            wanted = ",".join(sorted(shown))
            await wait_for(
                lambda: (
                    bool(streams)
                    and parse_qs(urlsplit(streams[-1]).query).get("output_agent_ids") == [wanted]
                ),
                what=f"an event stream for output of {wanted} only",
            )
            await page.keyboard.press("Escape")
            await expect(page.get_by_test_id("agents-drawer")).to_be_hidden()

            theme = await page.evaluate("document.documentElement.dataset.theme")
            await page.get_by_test_id("theme-toggle").click()
            flipped = "dark" if theme == "light" else "light"
            await expect(page.locator("html")).to_have_attribute("data-theme", flipped)
            await page.reload()
            await expect(page.locator("html")).to_have_attribute("data-theme", flipped)
            await expect(page.get_by_test_id("column")).to_have_count(2)
            await expect(column(page, hidden)).to_be_visible()


async def test_board_reconnects_after_a_runtime_restart(tmp_path: Path) -> None:
    with running(tmp_path) as (local, watch):
        async with chromium() as browser:
            async with connected(local) as mcp:
                agent = await call(mcp, "conv-r", "exec_command", cmd="echo before", workdir=str(tmp_path))
            page = await browser.new_page()
            await open_board(page, watch)
            await expect(page.get_by_test_id("column")).to_have_count(1)
            local.run("local", "stop")
            await expect(page.get_by_test_id("connection")).not_to_have_attribute("data-state", "live")
            local.run("local", "start", str(tmp_path))
            # The viewer finds the new runtime (new port) through discovery; the page retries.
            await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")
            async with connected(local) as mcp:
                await call(mcp, "conv-r", "exec_command", cmd="echo after the restart", workdir=str(tmp_path))
            board = page.get_by_test_id("column")
            await expect(board).to_have_count(1)
            await expect(cards(board, "command", "echo after the restart")).to_have_attribute(
                "data-status", "exited"
            )
            await expect(cards(board, "command")).to_have_count(2)
            assert agent["output"] == "before\n"


async def test_screenshots_of_a_busy_board(tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with running(tmp_path) as (local, watch):
        async with connected(local) as mcp, chromium() as browser:
            work = str(tmp_path)
            builder = (await call(mcp, "conv-b", "set_agent_alias", alias="Rindle implementation"))[
                "agent_id"
            ]
            await call(
                mcp,
                "conv-b",
                "exec_command",
                cmd="printf 'collected 12 items\\n\\n12 passed in 0.4s\\n'",
                workdir=work,
            )
            patch = (
                "*** Begin Patch\n*** Add File: rindle/core.py\n+def fold(items):\n+    return sum(items)\n"
                "*** Add File: README.md\n+# Rindle\n*** End Patch\n"
            )
            await call(mcp, "conv-b", "apply_patch", patch=patch, workdir=work)
            update = (
                "*** Begin Patch\n*** Update File: rindle/core.py\n@@\n def fold(items):\n"
                "-    return sum(items)\n+    total = 0\n+    for item in items:\n+        total += item\n"
                "+    return total\n*** End Patch\n"
            )
            await call(mcp, "conv-b", "apply_patch", patch=update, workdir=work)
            server = await call(
                mcp,
                "conv-b",
                "exec_command",
                cmd="echo serving on :8000; cat",
                workdir=work,
                yield_time_ms=300,
            )
            await call(mcp, "conv-b", "write_stdin", session_handle=server["session_handle"], chars="ping\n")
            docs = (await call(mcp, "conv-d", "set_agent_alias", alias="Docs pass"))["agent_id"]
            await call(mcp, "conv-d", "exec_command", cmd="ls -la", workdir=work)
            await call(mcp, "conv-d", "exec_command", cmd="grep -R TODO . ; exit 3", workdir=work)
            sleeper = await call(
                mcp, "conv-d", "exec_command", cmd="sleep 30", workdir=work, yield_time_ms=50
            )
            await call(
                mcp, "conv-d", "write_stdin", session_handle=sleeper["session_handle"], kill_process=True
            )
            review = await call(mcp, "conv-r", "exec_command", cmd="git status --short", workdir=work)
            assert review["exit_code"] is not None
            ticker = await call(
                mcp,
                "conv-r",
                "exec_command",
                cmd="for i in 1 2 3; do echo step $i; done; sleep 20",
                workdir=work,
                yield_time_ms=300,
            )
            for scheme in ("light", "dark"):
                context = await browser.new_context(
                    viewport={"width": 1440, "height": 900}, color_scheme=scheme
                )
                page = await context.new_page()
                await open_board(page, watch)
                await expect(page.get_by_test_id("column")).to_have_count(3)
                await expect(cards(column(page, builder), "file_changes")).to_have_count(2)
                await expect(cards(column(page, docs), "kill")).to_have_count(1)
                await expect(page.locator('[data-status="running"]')).to_have_count(2)
                await expect(page.locator("html")).to_have_attribute("data-theme", scheme)
                await page.screenshot(path=str(ARTIFACTS / f"board-{scheme}.png"))
                if scheme == "light":
                    await page.get_by_test_id("agents-button").click()
                    await expect(page.get_by_test_id("drawer-agent")).to_have_count(3)
                    await page.screenshot(path=str(ARTIFACTS / "drawer-light.png"))
                    await page.keyboard.press("Escape")
                    await page.set_viewport_size({"width": 420, "height": 800})
                    await page.screenshot(path=str(ARTIFACTS / "narrow-light.png"))
                await context.close()
            await call(
                mcp, "conv-r", "write_stdin", session_handle=ticker["session_handle"], kill_process=True
            )
            await call(
                mcp, "conv-b", "write_stdin", session_handle=server["session_handle"], kill_process=True
            )


async def test_a_card_says_what_its_waiting_call_waits_for(tmp_path: Path) -> None:
    """docs/observer.md: a command's card shows the `wait_for` of the call waiting on it,
    and drops it once that call returned."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    with running(tmp_path) as (local, watch):
        async with connected(local) as mcp, chromium() as browser:
            page = await browser.new_page()
            await open_board(page, watch)
            waiting = asyncio.create_task(
                call(mcp, "conv-wait", "exec_command", cmd=f"cat {gate}; sleep 30", workdir=str(tmp_path),
                     wait_for="Listening on \\d+", yield_time_ms=30000)
            )  # fmt: skip
            card = cards(page.get_by_test_id("column"), "command", f"cat {gate}")
            await expect(card.get_by_test_id("waiting-for")).to_have_text("waiting for Listening on \\d+")
            threading.Thread(target=lambda: gate.write_text("Listening on 8000\n"), daemon=True).start()
            done = await waiting
            assert done["wait"] == "matched", done
            await expect(card.get_by_test_id("waiting-for")).to_have_count(0)
            await expect(card).to_have_attribute("data-status", "running")
            await call(
                mcp, "conv-wait", "write_stdin", session_handle=done["session_handle"], kill_process=True
            )


async def test_a_full_screen_program_s_card_shows_its_screen(tmp_path: Path) -> None:
    """docs/observer.md: a running command whose latest result showed a screen (vi here)
    shows it on its card, a fixed-width block with the cursor's cell marked; it goes once
    the command ended."""
    (tmp_path / "notes.txt").write_text("first line of the notes\n")
    with running(tmp_path) as (local, watch):
        async with connected(local) as mcp, chromium() as browser:
            page = await browser.new_page(viewport={"width": 1500, "height": 1000})
            await open_board(page, watch)
            opened = await call(
                mcp, "conv-vi", "exec_command", cmd="vi notes.txt", workdir=str(tmp_path),
                wait_for="first line of the notes", yield_time_ms=20000,
            )  # fmt: skip
            assert opened["wait"] == "matched" and "screen" in opened, opened
            handle = opened["session_handle"]
            typed = await call(
                mcp, "conv-vi", "write_stdin", session_handle=handle, chars="Oadded from vi\x1b",
                wait_for="added from vi", yield_time_ms=10000,
            )  # fmt: skip
            assert "added from vi" in typed["screen"]["rows"], typed
            card = cards(page.get_by_test_id("column"), "command", "vi notes.txt")
            screen = card.get_by_test_id("screen")
            await expect(screen).to_contain_text("added from vi")
            await expect(screen).to_contain_text("first line of the notes")
            await expect(screen.locator(".screen-cursor")).to_have_count(1)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            await card.screenshot(path=str(ARTIFACTS / "vi-screen-card.png"))
            await call(
                mcp, "conv-vi", "write_stdin", session_handle=handle, chars=":wq\r", yield_time_ms=5000
            )
            await expect(card).to_have_attribute("data-status", "exited")
            await expect(card.get_by_test_id("screen")).to_have_count(0)
    assert (tmp_path / "notes.txt").read_text() == "added from vi\nfirst line of the notes\n"
