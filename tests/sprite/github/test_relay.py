"""The agent's plain git against github.com, through git-remote-zodex and the publisher, in a
real Sprite through MCP: clone and fetch work, push in default mode fails clearly, and the
agent never holds a token."""

from __future__ import annotations

import re
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


async def test_publish_pr_pushes_a_new_agent_branch_and_opens_the_pull(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    async with rig.sprite.mcp() as mcp:
        code, output = await run(
            mcp,
            "git clone -q https://github.com/acme/gadgets && cd gadgets && echo more >> README.md"
            " && git commit -qam 'More words' && git rev-parse HEAD",
            workspace,
        )
        assert code == 0, output
        head = output.strip().splitlines()[-1]
        code, output = await run(
            mcp,
            "zodex-agent github publish-pr --repo acme/gadgets --title 'More words' --body 'Why: tests' --draft",
            f"{workspace}/gadgets",
        )
    assert code == 0, output
    lines = dict(line.split(": ", 1) for line in output.splitlines() if ": " in line)
    assert output.splitlines()[0] == "publish-pr: created"
    pull = rig.hub.pulls[-1]
    assert (pull.repo, pull.title, pull.body, pull.base, pull.draft) == (
        "acme/gadgets",
        "More words",
        "Why: tests",
        "main",
        True,
    )
    assert lines["repo"] == "acme/gadgets"
    assert lines["number"] == str(pull.number)
    assert lines["url"] == f"{rig.hub.url}/acme/gadgets/pull/{pull.number}"
    assert (lines["branch"], lines["base"], lines["draft"]) == (pull.head, "main", "true")
    assert re.fullmatch(r"agent/\d{10}-[a-z0-9]{8}", pull.head), pull.head
    assert rig.hub.refs("acme/gadgets")[f"refs/heads/{pull.head}"] == head


async def test_publish_pr_refuses_a_dirty_worktree_a_wrong_origin_and_bad_fields(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    pulls, refs = len(rig.hub.pulls), rig.hub.refs("acme/widgets")
    async with rig.sprite.mcp() as mcp:
        code, output = await run(
            mcp, "git clone -q https://github.com/acme/widgets dirty && echo x >> dirty/README.md", workspace
        )
        assert code == 0, output
        refusals = {
            "cd dirty && zodex-agent github publish-pr --repo acme/widgets --title T":
                "publish-pr requires a clean worktree; commit or stash changes first",
            "cd dirty && git checkout -q . && zodex-agent github publish-pr --repo acme/gadgets --title T":
                "current checkout is for acme/widgets, but publish-pr targeted acme/gadgets",
            "cd dirty && git remote set-url origin https://gitlab.com/acme/widgets && zodex-agent github publish-pr --repo acme/widgets --title T":
                "git remote origin does not point to a supported GitHub repo URL: https://gitlab.com/acme/widgets",
            "cd dirty && git remote set-url origin git@github.com:acme/widgets.git && zodex-agent github publish-pr --repo acme/widgets --title ''":
                "PR title cannot be empty",
            f"cd dirty && zodex-agent github publish-pr --repo acme/widgets --title {'t' * 241}":
                "PR title exceeds limit (241 > 240)",
            "cd dirty && zodex-agent github publish-pr --repo acme/widgets --title T --body \"$(head -c 16001 /dev/zero | tr '\\0' b)\"":
                "PR body exceeds limit (16001 > 16000)",
            "cd dirty && zodex-agent github publish-pr --repo 'acme/../x' --title T": "repo must be in owner/repo form",
            "cd dirty && zodex-agent github publish-pr --repo acme/widgets --title T --base 'a..b'": "ref is invalid",
        }  # fmt: skip
        for command, message in refusals.items():
            code, output = await run(mcp, command, workspace)
            assert code != 0 and message in output, (command, output)
    assert len(rig.hub.pulls) == pulls and rig.hub.refs("acme/widgets") == refs
