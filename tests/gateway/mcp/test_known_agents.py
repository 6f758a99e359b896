"""The agents a gateway remembers are bounded (docs/agents.md#identity): however many
conversations, and however long their ``openai/session`` values, the gateway keeps the
last 1024 identities, by a hash of each key; an older one is looked up again in history and
keeps its agent id."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import mcp_types as types
import pytest

from tests.support.in_process import InProcessDispatcher
from zodex_gateway.agents.identity import AGENTS_KEPT, KnownAgents
from zodex_gateway.history import HistoryStore
from zodex_gateway.mcp.local_features import LocalFeatures
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher

pytestmark = pytest.mark.timeout(60)


def test_the_least_recently_used_identity_goes_first() -> None:
    known: KnownAgents[str] = KnownAgents(kept=3)
    for key in ("a", "b", "c"):
        known.put(key, key.upper())
    assert known.get("a") == "A"  # a is now the most recently used
    known.put("d", "D")
    assert [known.get(k) for k in ("a", "b", "c", "d")] == ["A", None, "C", "D"]
    for n in range(AGENTS_KEPT * 3):
        known.put(f"k{n}", "x")
    assert len(known) == 3


async def test_long_session_values_of_many_conversations_are_not_kept(
    twin: InProcessDispatcher, tmp_path: Path
) -> None:
    with HistoryStore(tmp_path / "history") as store:
        handlers = ToolDispatcher(twin, local=LocalFeatures(history=store))
        label = types.CallToolRequestParams(name="set_agent_alias", arguments={"alias": "worker"})

        async def agent_of(session: str) -> str:
            result = await handlers.call(label, {"openai/session": session}, None)
            assert not result.is_error, result.content
            agent_id: str = result.structured_content["agent_id"]
            return agent_id

        first = await agent_of("s0-" + "v" * 16384)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for n in range(1, 300):  # 300 conversations, 16 KiB of session value each: 4.7 MiB
                await agent_of(f"s{n}-" + "v" * 16384)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert held < 1024 * 1024, f"{held} bytes kept for 300 identities"
        assert await agent_of("s0-" + "v" * 16384) == first, "the same conversation, the same agent"
