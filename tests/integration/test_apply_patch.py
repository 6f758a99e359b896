"""apply_patch through a real MCP client (docs/tools.md#apply_patch, docs/apply_patch.md#results): routing, workdir rules, results."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support.gateway import CONNECTORS, GatewayEnv
from tests.support.second_user import second_user_ids

pytestmark = pytest.mark.timeout(60)


async def test_patch_applies_and_reports(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "gone.txt").write_text("bye\n")
    patch = (
        "*** Begin Patch\n"
        "*** Update File: a.txt\n"
        "@@\n"
        " one\n"
        "-two\n"
        "+TWO\n"
        "*** Add File: sub/new.txt\n"
        "+fresh\n"
        "*** Delete File: gone.txt\n"
        "*** End Patch\n"
    )
    real = os.path.realpath(tmp_path)
    async with connect(genv) as mcp:
        result = await mcp.call("apply_patch", patch=patch, workdir=str(tmp_path))
    assert not result.is_error
    assert result.content[0].text == (
        f"Success. Updated the following files:\nM {real}/a.txt\nA {real}/sub/new.txt\nD {real}/gone.txt"
    )
    assert (tmp_path / "a.txt").read_text() == "one\nTWO\nthree\n"
    assert (tmp_path / "sub" / "new.txt").read_text() == "fresh\n"
    assert not (tmp_path / "gone.txt").exists()


async def test_workdir_is_checked_before_the_patch(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        text = await mcp.error("apply_patch", patch="not a patch", workdir="relative")
        assert text == "workdir must be an absolute path: relative"
        text = await mcp.error("apply_patch", patch="not a patch", workdir=str(tmp_path))
    assert text.startswith("Invalid patch")


async def test_malformed_patch_touches_nothing(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    # Valid Add first, then a chunk line with no valid prefix: the whole patch is refused.
    patch = "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Update File: a.txt\n@@\n-one\n+uno\n?bogus\n*** End Patch\n"
    async with connect(genv) as mcp:
        text = await mcp.error("apply_patch", patch=patch, workdir=str(tmp_path))
    assert text.startswith("Invalid patch hunk on line 8:"), text
    assert "?bogus" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


async def test_partial_application_is_an_error_naming_both_sides(
    genv: GatewayEnv, connect, tmp_path: Path
) -> None:
    (tmp_path / "ok.txt").write_text("keep\nold\n")
    (tmp_path / "stale.txt").write_text("alpha\nbeta\ngamma\n")
    patch = (
        "*** Begin Patch\n"
        "*** Update File: ok.txt\n"
        "@@\n"
        " keep\n"
        "-old\n"
        "+new\n"
        "*** Update File: stale.txt\n"
        "@@\n"
        " alpha\n"
        "-beta gone\n"
        "+replacement\n"
        "*** End Patch\n"
    )
    real = os.path.realpath(tmp_path)
    async with connect(genv) as mcp:
        text = await mcp.error("apply_patch", patch=patch, workdir=str(tmp_path))
    assert text.startswith("apply_patch partially applied: 1 of 2 file operations succeeded.")
    assert f"Already changed:\nM {real}/ok.txt" in text
    assert f"Update File {real}/stale.txt: Failed to find expected lines" in text
    assert "Nearest match at line 1" in text
    assert (tmp_path / "ok.txt").read_text() == "keep\nnew\n"
    assert (tmp_path / "stale.txt").read_text() == "alpha\nbeta\ngamma\n"


async def test_absolute_paths_outside_the_workdir(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "elsewhere.txt"
    patch = f"*** Begin Patch\n*** Add File: {outside}\n+routed, not confined\n*** End Patch\n"
    async with connect(genv) as mcp:
        result = await mcp.call("apply_patch", patch=patch, workdir=str(work))
    assert not result.is_error, result.content[0].text
    assert outside.read_text() == "routed, not confined\n"


async def test_a_root_worker_keeps_the_owner_of_another_users_private_file(
    genv: GatewayEnv, tmp_path: Path
) -> None:
    """docs/apply_patch.md#files: a rewrite keeps owner, group and mode; the temporary file
    is never wider than the target."""
    if os.geteuid() != 0:
        pytest.skip("giving a file to another owner needs root")
    uid, gid = second_user_ids()
    private = tmp_path / "private.txt"
    private.write_text("old\n")
    os.chown(private, uid, gid)
    private.chmod(0o600)
    patch = "*** Begin Patch\n*** Update File: private.txt\n@@\n-old\n+new\n*** End Patch\n"
    async with CONNECTORS["http"](genv) as mcp:
        result = await mcp.call("apply_patch", patch=patch, workdir=str(tmp_path))
    assert not result.is_error, result.content[0].text
    st = private.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid, gid, 0o600)
    assert private.read_text() == "new\n"
