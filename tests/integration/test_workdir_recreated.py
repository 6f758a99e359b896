"""A worker never depends on its own current directory (docs/tools.md#exec_command)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.gateway import GatewayEnv, stdio_gateway

pytestmark = pytest.mark.timeout(60)


async def test_a_removed_and_recreated_workdir_keeps_working(genv: GatewayEnv, tmp_path: Path) -> None:
    workdir = tmp_path / "d"
    workdir.mkdir()
    async with stdio_gateway(genv) as mcp:
        assert (await mcp.exec("echo first", str(workdir)))["output"] == "first\n"
        shutil.rmtree(workdir)
        workdir.mkdir()
        again = await mcp.exec("echo again; pwd", str(workdir))
        assert again["output"] == f"again\n{workdir}\n"
        assert again["exit_code"] == 0


async def test_a_removed_workdir_gives_the_workdir_error(genv: GatewayEnv, tmp_path: Path) -> None:
    workdir = tmp_path / "d"
    workdir.mkdir()
    async with stdio_gateway(genv) as mcp:
        assert (await mcp.exec("echo first", str(workdir)))["output"] == "first\n"
        shutil.rmtree(workdir)
        assert await mcp.error("exec_command", cmd="true", workdir=str(workdir)) == (
            f"workdir does not exist: {workdir}"
        )
        workdir.mkdir()
        assert (await mcp.exec("echo back", str(workdir)))["output"] == "back\n"
