"""Liveboard's modules and board in Chromium, served by a watch host over an in-process
observer: output merging, formatting, paging older history, and hostile text staying text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Page, expect

from tests.gateway.observer.observer_support import IDENTITY_KEY_B, Clock, Seeded, call
from tests.gateway.viewers.watch.live_support import chromium
from tests.gateway.viewers.watch.support import Observer, RunningHost
from tests.gateway.viewers.watch.test_liveboard_contract import js_names, js_tables
from zodex_gateway.history import HistoryStore

pytestmark = pytest.mark.timeout(60)
expect.set_options(timeout=20_000)


@pytest.fixture
async def page(host: RunningHost) -> AsyncIterator[Page]:
    async with chromium() as browser:
        opened = await browser.new_page()
        await opened.goto(host.url)
        await expect(opened.get_by_test_id("connection")).to_have_attribute("data-state", "live")
        yield opened


async def run(page: Page, script: str) -> Any:
    """``script`` (the body of an async function) in the page, with Liveboard's modules."""
    return await page.evaluate(
        f"""async () => {{
            const {{ Store }} = await import('./static/store.js');
            const format = await import('./static/format.js');
            {script}
        }}"""
    )


async def test_streamed_output_and_tails_merge_without_repeats(page: Page) -> None:
    steps = await run(
        page,
        """
        const s = new Store();
        const seen = [];
        const rec = (over) => ({presentation_id: 'p1', agent_id: 'ab12', kind: 'command', status: 'running',
                                session_handle: 'h1', output_tail: '', updated_at_ms: 1, ...over});
        s.upsertRecord(rec({}));
        s.appendOutput(null, 'h1', 'one\\n');                                 // found by its session
        seen.push(s.outputOf(rec({})));
        s.upsertRecord(rec({output_tail: 'one\\nprompt: ', updated_at_ms: 2})); // a line being written
        seen.push(s.outputOf(rec({})));
        s.appendOutput('p1', 'h1', 'prompt: yes\\n');                         // its final form
        seen.push(s.outputOf(rec({})));
        s.upsertRecord(rec({output_tail: 'one\\nprompt: yes\\n', updated_at_ms: 3}));
        seen.push(s.outputOf(rec({})));
        s.upsertRecord(rec({output_tail: 'stale', updated_at_ms: 2}));        // older: ignored
        seen.push(s.records.get('p1').output_tail);
        s.appendOutput('p1', 'h1', 'bye\\n');
        s.upsertRecord(rec({status: 'exited', output_tail: 'prompt: yes\\nbye\\n', updated_at_ms: 4})); // cut tail
        s.appendOutput('p1', 'h1', 'late\\n');                               // after the end: ignored
        seen.push(s.outputOf(rec({})));
        s.upsertRecord(rec({presentation_id: 'p2', session_handle: 'h2', output_tail: 'x\\n'}));
        s.upsertRecord(rec({presentation_id: 'p2', session_handle: 'h2', output_tail: 'y\\n', updated_at_ms: 5}));
        seen.push(s.outputOf(rec({presentation_id: 'p2'})));                 // a tail that moved on wins
        return seen;
        """,
    )
    assert steps == [
        "one\n",
        "one\nprompt: ",
        "one\nprompt: yes\n",
        "one\nprompt: yes\n",
        "one\nprompt: yes\n",
        "one\nprompt: yes\nbye\n",
        "y\n",
    ]


async def test_the_contracts_tables_are_frozen_and_named_by_their_values(page: Page) -> None:
    tables = await page.evaluate(
        """async () => {
            const contract = await import('./static/contract.js');
            return Object.fromEntries(Object.entries(contract)
                .filter(([, value]) => typeof value === 'object')
                .map(([name, table]) => [name, {frozen: Object.isFrozen(table), entries: {...table}}]));
        }"""
    )
    assert sorted(tables) == sorted(js_tables())
    for name in js_tables():
        assert tables[name] == {"frozen": True, "entries": js_names(name)}, name


async def test_formatting(page: Page) -> None:
    result = await run(
        page,
        """
        return {
          rows: format.diffRows(['--- a.py', '+++ a.py', '@@ -3,2 +3,3 @@', ' keep', '-old', '+new', '+more',
                                 '… 5 more rows']),
          typed: format.typedPieces('ls\\n\\x03\\tq\\x1b'),
          durations: [format.duration(450), format.duration(12300), format.duration(125000)],
          short: format.shortPath('/home/me/src/zodex/gateway/app', 3),
          relative: format.relativeTo('/w/p/src/x.py', '/w/p'),
        };
        """,
    )
    assert result["rows"] == [
        {"kind": "hunk", "text": "@@ -3,2 +3,3 @@", "old": None, "new": None},
        {"kind": "ctx", "text": "keep", "old": 3, "new": 3},
        {"kind": "del", "text": "old", "old": 4, "new": None},
        {"kind": "add", "text": "new", "old": None, "new": 4},
        {"kind": "add", "text": "more", "old": None, "new": 5},
        {"kind": "note", "text": "… 5 more rows", "old": None, "new": None},
    ]
    assert result["typed"] == [
        {"text": "ls"},
        {"key": "⏎"},
        {"key": "^C"},
        {"key": "⇥"},
        {"text": "q"},
        {"key": "Esc"},
    ]
    assert result["durations"] == ["450ms", "12s", "2m 05s"]
    assert result["short"] == "…/zodex/gateway/app"
    assert result["relative"] == "src/x.py"


async def test_older_history_loads_on_scrolling(
    host: RunningHost, store: HistoryStore, clock: Clock, seeded: Seeded
) -> None:
    busy = store.agent_for(IDENTITY_KEY_B + "-busy").agent_id
    for n in range(45):
        call(store, clock, agent_id=busy, tool="exec_command", args={"cmd": f"echo {n}"}, workdir="/w")
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1200, "height": 700})
        await page.goto(host.url)
        column = page.locator(f'[data-testid="column"][data-agent-id="{busy}"]')
        cards = column.get_by_test_id("card")
        await expect(cards).to_have_count(30)
        await expect(cards.first).to_contain_text("echo 44")
        await column.get_by_test_id("cards").evaluate("list => { list.scrollTop = list.scrollHeight; }")
        await expect(cards).to_have_count(45)
        await expect(cards.last).to_contain_text("echo 0")
        await expect(column.get_by_test_id("load-older")).to_have_text("beginning of history")


async def test_a_gap_brings_back_what_was_missed(
    page: Page, observer: Observer, store: HistoryStore, clock: Clock, seeded: Seeded
) -> None:
    board = page.locator(f'[data-testid="column"][data-agent-id="{seeded.agent_a}"]')
    await expect(board.get_by_test_id("card").first).to_be_visible()
    since_ms = round(clock.now * 1000)
    # Written without an event, as if the page's events had been dropped.
    call(
        store, clock, agent_id=seeded.agent_a, tool="exec_command", args={"cmd": "echo missed"}, workdir="/w"
    )
    missed = board.get_by_test_id("card").filter(has_text="echo missed")
    await expect(missed).to_have_count(0)
    observer.publish("gap", {"reason": "subscriber_overflow", "recovery_since_ms": since_ms})
    await expect(missed).to_have_count(1)
    await expect(board.get_by_test_id("card").first).to_contain_text("echo missed")


async def test_hostile_text_stays_text(host: RunningHost, store: HistoryStore, clock: Clock) -> None:
    sly = store.agent_for(IDENTITY_KEY_B + "-sly").agent_id
    payload = '<img src=x onerror="window.__owned=1"><script>window.__owned=2</script>'
    store.set_alias(sly, "<b>bold</b>")
    call(store, clock, agent_id=sly, tool="exec_command", args={"cmd": payload}, workdir="/w")
    call(store, clock, agent_id=sly, tool="bogus_tool", args={}, ok=False, error=payload)
    async with chromium() as browser:
        page = await browser.new_page()
        await page.goto(host.url)
        column = page.locator(f'[data-testid="column"][data-agent-id="{sly}"]')
        await expect(column.get_by_test_id("alias")).to_have_text("<b>bold</b>")
        await expect(column.get_by_test_id("command")).to_have_text(payload)
        await expect(column.get_by_test_id("error")).to_have_text(payload)
        assert await column.locator("img, script, b").count() == 0
        assert await page.evaluate("window.__owned") is None
