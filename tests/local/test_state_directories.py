"""Directories that hold Zodex's secrets, pre-created by another account or left writable
by it, are refused with one line naming the directory and its owner, and nothing in them
changes (docs/security.md#state-directories)."""

from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gateway import GATEWAY
from tests.support.local import LocalEnv, local_env

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another account needs root"),
]


def give_to_nobody(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid)
    os.chmod(path, 0o777)


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its owner and mode: a refusal must change none."""
    found = {}
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        found[str(path.relative_to(root))] = (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode))
    return found


def refused(local: LocalEnv, *args: str) -> str:
    done = local.run(*args, check=False)
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def owned_by_nobody(directory: Path) -> str:
    return (
        f"error: {directory} is owned by nobody, not by you (root): Zodex will not keep secrets "
        "under it; remove it or change its owner"
    )


# The directory pre-created as nobody's, mode 0777.
CASES: dict[str, Callable[[Path], Path]] = {
    "state tree": lambda root: root / "state" / "zodex",
    "state runtime dir": lambda root: root / "state" / "zodex" / "local" / "runtime",
    "XDG state base": lambda root: root / "state",
    "XDG runtime dir": lambda root: root / "run" / "zodex",
    "config dir": lambda root: root / "config" / "zodex",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_another_accounts_directory_is_refused_and_left_alone(case: str, tmp_path: Path) -> None:
    pick = CASES[case]
    with local_env() as local:
        hostile = pick(local.root)
        for parent in reversed(hostile.relative_to(local.root).parents[:-1]):
            (local.root / parent).mkdir(mode=0o700, exist_ok=True)
        give_to_nobody(hostile)
        before = snapshot(local.root)
        for command in (("local", "setup"), ("local", "start", str(tmp_path))):
            assert refused(local, *command) == owned_by_nobody(hostile), command
        if case == "state runtime dir":  # where discovery.json would be read from
            assert refused(local, "local", "status") == owned_by_nobody(hostile)
        assert snapshot(local.root) == before, "nothing created, chmodded or chowned"
        assert not any(local.root.rglob("mcp-token")) and not any(local.root.rglob("observer-bearer"))


def test_a_directory_writable_by_others_is_refused_even_when_it_is_ours(tmp_path: Path) -> None:
    with local_env() as local:
        zodex = local.root / "state" / "zodex"
        zodex.mkdir(parents=True)
        os.chmod(zodex, 0o777)
        before = snapshot(local.root)
        message = refused(local, "local", "start", str(tmp_path))
        assert message == (
            f"error: {zodex} (owner root) is writable by group or others (mode 0777): Zodex will not keep "
            f"secrets under it; run chmod go-w {zodex}"
        )
        os.chmod(zodex, 0o775)
        assert "(mode 0775)" in refused(local, "local", "setup")
        assert snapshot(local.root) == {**before, "state/zodex": (0, 0, 0o775)}
        # Fixed by the user: Local starts, and its own directories are private.
        os.chmod(zodex, 0o755)
        local.run("local", "start", str(tmp_path))
        assert stat.S_IMODE(zodex.stat().st_mode) == 0o700
        runtime = local.root / "state" / "zodex" / "local" / "runtime"
        assert stat.S_IMODE(runtime.stat().st_mode) == 0o700


def test_a_foreground_gateway_refuses_a_runtime_root_of_another_account(tmp_path: Path) -> None:
    with local_env() as local:
        hostile = local.root / "run" / "zodex"
        give_to_nobody(hostile)
        done = subprocess.run(
            [GATEWAY, "stdio"],
            env=local.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode != 0
        assert done.stderr.strip().splitlines()[-1] == "Error: " + owned_by_nobody(hostile).removeprefix(
            "error: "
        )
        assert list(hostile.iterdir()) == [], "no runtime directory, key or socket was made in it"
