"""The agent's plain git against github.com, through git-remote-zodex and the publisher, in a
real Sprite through MCP: clone and fetch work, push in default mode fails clearly, and the
agent never holds a token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sprite.github.github_support import Rig, github_sprite, run
from tests.support.accounts import require_root


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    require_root()
    with github_sprite() as running:
        yield running


async def test_clone_fetch_and_a_refused_push_in_default_mode(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    before = rig.hub.refs("acme/widgets")
    async with rig.sprite.mcp() as mcp:
        code, output = await run(
            mcp, "git clone https://github.com/acme/widgets && cat widgets/README.md", workspace
        )
        assert code == 0, output
        assert "# acme/widgets" in output
        code, output = await run(
            mcp, "git config remote.origin.url && git fetch && git pull --ff-only", f"{workspace}/widgets"
        )
        assert code == 0, output
        assert output.splitlines()[0] == "https://github.com/acme/widgets"
        code, output = await run(
            mcp,
            "git commit -q --allow-empty -m change && git push origin HEAD:refs/heads/feature",
            f"{workspace}/widgets",
        )
        assert code != 0
        assert "direct push is not enabled (default mode: clone and fetch only)" in output, output
        assert "zodex-agent github publish-pr" in output
    assert rig.hub.refs("acme/widgets") == before


async def test_a_repo_the_reader_app_does_not_cover_is_not_found(rig: Rig) -> None:
    async with rig.sprite.mcp() as mcp:
        code, output = await run(mcp, "git clone https://github.com/other/thing", str(rig.sprite.workspace))
    assert code != 0
    assert "repository other/thing is not reachable with the reader App" in output, output
