"""Invisible characters in an alias are refused on both paths that set one, the model's
``set_agent_alias`` and Liveboard's ``PUT /v1/agents/{id}/alias``, and change nothing
(docs/agents.md#aliases)."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from tests.local.test_agents_and_history import call
from tests.support.local import connected, local_env, observer_bearer

pytestmark = pytest.mark.timeout(120)


async def test_hidden_characters_are_refused_by_the_model_and_the_board(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        base = local.discovery()["observability"]["base_url"]
        headers = {"Authorization": f"Bearer {observer_bearer(local)}"}
        async with connected(local) as mcp:
            named = await call(mcp, "conv-a", "set_agent_alias", alias="Docs pass")
            agent = named.structured_content["agent_id"]
            zero_width = await call(mcp, "conv-a", "set_agent_alias", alias="Docs\u200bpass")
            assert zero_width.is_error
            assert zero_width.content[0].text.startswith("alias must not contain U+200B (ZERO WIDTH SPACE)")
            filler = await call(mcp, "conv-a", "set_agent_alias", alias="\u3164\u3164")
            assert filler.is_error
            assert filler.content[0].text.startswith("alias must contain a visible character")
            flag = "\U0001f3f4\U000e0067\U000e0062\U000e0077\U000e006c\U000e0073\U000e007f Welsh docs"
            assert not (await call(mcp, "conv-b", "set_agent_alias", alias=flag)).is_error
            async with httpx2.AsyncClient(timeout=10) as client:
                board = await client.put(
                    f"{base}/v1/agents/{agent}/alias", json={"alias": "Docs\u2028pass"}, headers=headers
                )
                assert board.status_code == 400
                assert board.json()["error"] == "alias must not contain U+2028 (LINE SEPARATOR)"
                shown = await client.get(f"{base}/v1/agents/{agent}", headers=headers)
                assert shown.json()["alias"] == "Docs pass", "a refused alias changes nothing"
                agents = (await client.get(f"{base}/v1/agents", headers=headers)).json()["agents"]
                assert flag in [a["alias"] for a in agents]
