"""The Textual app driven in-process (Textual's pilot) against a served observer: where the
cursor goes as records arrive, and reading older pages at the bottom."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.viewers.tui.conftest import Served
from tests.support.gateway import wait_for
from zodex_gateway.local.observer_access import ObserverAccess
from zodex_gateway.viewers.tui import run_tui
from zodex_gateway.viewers.tui.app import WatchApp


def arriving(served: Served, pid: str, started_ms: int) -> dict[str, Any]:
    return {
        "presentation_id": pid,
        "agent_id": served.seeded.agent_a,
        "kind": "stdin",
        "started_at_ms": started_ms,
        "updated_at_ms": started_ms,
        "invocation_ids": [pid],
        "session_handle": "h-run",
        "chars": pid,
        "status": "ok",
        "summary": "",
    }


def cursor_pid(app: WatchApp) -> str | None:
    index = app.timeline.highlighted
    return app._order[index] if index is not None else None


async def test_cursor_stays_on_its_record_or_follows_the_newest(served: Served) -> None:
    app = WatchApp(served.access, agent_id=served.seeded.agent_a, show_all=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: len(app._order) == 5, what="the first page")
        newest = app._order[0]
        assert cursor_pid(app) == newest
        await pilot.press("j", "j")
        chosen = app._order[2]
        assert cursor_pid(app) == chosen

        keys = {"agent_id": served.seeded.agent_a}
        served.publish("presentation_updated", arriving(served, "inv_new1", 1_900_000_000_000), **keys)
        await wait_for(lambda: len(app._order) == 6, what="a new record")
        assert cursor_pid(app) == chosen and app._order.index(chosen) == 3, "it stays on its record"

        await pilot.press("g")
        assert cursor_pid(app) == "inv_new1"
        served.publish("presentation_updated", arriving(served, "inv_new2", 1_900_000_001_000), **keys)
        await wait_for(lambda: len(app._order) == 7, what="another record")
        assert cursor_pid(app) == "inv_new2", "at the top it follows the newest"

        await pilot.press("enter")
        assert "inv_new2" in app.expanded
        await pilot.press("slash", "i", "n", "v", "_", "n", "e", "w", "1")
        assert app._order == ["inv_new1"]
        await pilot.press("escape")
        assert len(app._order) == 7 and cursor_pid(app) == "inv_new1", "the search's find stays chosen"
        await pilot.press("q")
    assert app.return_code == 0


async def test_older_records_load_at_the_bottom(served: Served) -> None:
    app = WatchApp(served.access, agent_id=served.seeded.agent_a, show_all=False)
    app.live.page_limit = 2
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: len(app._order) == 2, what="the first page")
        await pilot.press("G")
        await wait_for(lambda: len(app._order) == 4, what="the second page")
        await pilot.press("G")
        await wait_for(lambda: len(app._order) == 5, what="the last page")
        assert not app.live.has_older()


def test_run_tui_needs_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    access = ObserverAccess("http://127.0.0.1:9", "b" * 64, "rt")
    assert run_tui(access, agent_id=None, show_all=False) == 2
    assert "needs a terminal" in capsys.readouterr().err


def test_run_tui_without_textual_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util
    import sys

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "textual" else real_find_spec(name, *a)
    )
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    access = ObserverAccess("http://127.0.0.1:9", "b" * 64, "rt")
    assert run_tui(access, agent_id=None, show_all=False) == 2
    assert capsys.readouterr().err == (
        "error: zodex local watch --tui needs Textual, which this Zodex was installed without (the tui extra); "
        f"install it with `{sys.executable} -m pip install 'textual>=8.2,<8.3'`, or drop --tui for Liveboard\n"
    )


def test_the_tui_extra_and_the_printed_requirement_agree() -> None:
    import tomllib
    from pathlib import Path

    from zodex_gateway.viewers.tui import TEXTUAL_REQUIREMENT

    project = tomllib.loads((Path(__file__).parents[4] / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["tui"] == [TEXTUAL_REQUIREMENT]
    assert not any(dep.startswith("textual") for dep in project["dependencies"])
