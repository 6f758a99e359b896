"""The second-account helper works: commands run as ``nobody`` and can import the project."""

from __future__ import annotations

from pathlib import Path

from tests.support.second_user import (
    hand_to_second_user,
    require_second_user,
    run_as_second_user,
    second_user_ids,
    second_user_python,
)


def test_runs_as_nobody() -> None:
    require_second_user()
    done = run_as_second_user(["id", "-u"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(second_user_ids()[0])


def test_second_user_python_imports_the_project(second_user_tree: Path) -> None:
    require_second_user()
    probe = "import os, zodex_worker, zodex_gateway, tests.support.waiting; print(os.getuid())"
    done = run_as_second_user([*second_user_python(), "-c", probe])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(second_user_ids()[0])


def test_world_tree_is_reachable_and_writable_once_handed_over(second_user_tree: Path) -> None:
    require_second_user()
    hand_to_second_user(second_user_tree)
    target = second_user_tree / "made-by-nobody"
    done = run_as_second_user(["touch", str(target)])
    assert done.returncode == 0, done.stderr
    assert target.stat().st_uid == second_user_ids()[0]
