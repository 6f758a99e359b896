"""Another account that made ``/tmp/zodex-<uid>`` first, where ``XDG_RUNTIME_DIR`` is unset,
neither gets the runtime's key and sockets nor keeps Zodex from starting: ``zodex local
start`` and ``zodex-gateway stdio`` use a private directory of a fresh name
(docs/security.md#state-directories). The shared ``/tmp`` is a sticky, world-writable
directory of the test's own, named by ``TMPDIR``."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import GatewayEnv, stdio_gateway
from tests.support.local import connected, local_env
from tests.support.second_user import require_second_user, run_as_second_user, world_tree_dir

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["0777", "0755"], ids=["world-writable", "other-owned"])
def planted_tmp(request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path]]:
    """A shared tmp in which ``nobody`` made ``zodex-<uid>`` first (with the given mode)."""
    require_second_user()
    with world_tree_dir("shared-tmp") as shared:
        shared.chmod(0o1777)
        planted = shared / f"zodex-{os.getuid()}"
        made = run_as_second_user(["mkdir", "-m", request.param, str(planted)])
        assert made.returncode == 0, made.stderr
        yield shared, planted


def private_roots(shared: Path) -> list[Path]:
    """The user's own runtime roots in ``shared`` besides the planted name."""
    found = []
    for entry in sorted(shared.iterdir()):
        info = entry.lstat()
        if entry.name.startswith(f"zodex-{os.getuid()}-") and info.st_uid == os.geteuid():
            assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
            found.append(entry)
    return found


async def test_local_start_uses_a_private_root_beside_a_planted_one(
    planted_tmp: tuple[Path, Path], tmp_path: Path
) -> None:
    shared, planted = planted_tmp
    with local_env() as local:
        env = {"TMPDIR": str(shared), "XDG_RUNTIME_DIR": ""}  # unset: an empty value is ignored
        try:
            local.run("local", "start", str(tmp_path), **env)
            runtime_dir = Path(local.discovery()["runtime_dir"])
            async with connected(local) as mcp:
                ran = await mcp.exec("echo started", str(tmp_path))
                assert ran["output"] == "started\n"
            [root] = private_roots(shared)
            assert runtime_dir.parent == root
            assert (runtime_dir / "key").is_file() and stat.S_IMODE(
                (runtime_dir / "key").stat().st_mode
            ) == 0o600
            assert list(planted.iterdir()) == [], "nothing of the runtime in the planted directory"
            # A second start after a stop finds the same private root again.
            local.run("local", "stop", **env)
            local.run("local", "start", str(tmp_path), **env)
            assert Path(local.discovery()["runtime_dir"]).parent == root
            assert private_roots(shared) == [root]
        finally:
            local.run("local", "stop", check=False, **env)


async def test_a_stdio_gateway_uses_a_private_root_beside_a_planted_one(
    planted_tmp: tuple[Path, Path],
) -> None:
    shared, planted = planted_tmp
    root = Path(tempfile.mkdtemp(prefix="zg"))
    try:
        env = GatewayEnv(root, extra={"TMPDIR": str(shared), "XDG_RUNTIME_DIR": ""})
        async with stdio_gateway(env) as mcp:
            ran = await mcp.exec("echo started", str(root))
            assert ran["output"] == "started\n"
            [private] = private_roots(shared)
            assert [p.name for p in private.iterdir() if len(p.name) == 12], "its runtime directory is there"
        assert list(planted.iterdir()) == []
    finally:
        shutil.rmtree(root, ignore_errors=True)
