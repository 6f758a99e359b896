"""A call that history cannot record is refused before anything runs (issue: history)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import mcp_types as types
import pytest

from tests.support.in_process import InProcessDispatcher
from zodex_gateway.history import HistoryStore
from zodex_gateway.mcp.local_features import LocalFeatures
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_protocol.limits import Limits

pytestmark = pytest.mark.timeout(30)


async def test_full_history_refuses_the_call_and_runs_nothing(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history")
    dispatcher = InProcessDispatcher(Limits(), tmp_path / "spill", ["/bin/bash", "-c"])
    try:
        # Cap the database at its current size: the next insert fails as on a full disk.
        conn = store._db.conn
        assert conn is not None
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        handlers = ToolDispatcher(dispatcher, local=LocalFeatures(history=store))
        marker = tmp_path / "ran"
        big_args = {"cmd": f"touch {marker}; echo {'x' * 20000}", "workdir": str(tmp_path)}
        result = await handlers.call_tool(
            None, types.CallToolRequestParams(name="exec_command", arguments=big_args)
        )
        assert result.is_error
        assert len(result.content) == 1 and "\n" not in result.content[0].text
        assert "history cannot record this call" in result.content[0].text
        await asyncio.sleep(0)  # nothing was scheduled to run; give it no chance to sneak in
        assert not marker.exists()
        assert dispatcher.events == [], "no process was started"
    finally:
        await dispatcher.close()
        store.close()
