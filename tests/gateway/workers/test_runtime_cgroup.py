"""A runtime owns one cgroup for its sessions: recorded in its directory (again after the
directory was removed under it), removed with it (docs/sessions.md#process-groups-and-cgroups)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cgroups import kill_and_remove, require_cgroups
from zodex_gateway.workers.runtime import Runtime
from zodex_system import cgroups


def test_the_runtime_group_is_recorded_restored_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_cgroups()
    (tmp_path / "run").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.delenv(cgroups.ENV_SWITCH, raising=False)
    runtime = Runtime.create(state_dir=tmp_path / "state")
    group = runtime.cgroup
    try:
        assert group is not None and group.path.is_dir()
        assert group.path.name == runtime.runtime_id and group.path.parent.name == "zodex"
        assert cgroups.runtime_group(runtime.layout.root) == group
        shutil.rmtree(runtime.layout.root)
        assert runtime.restore_directory()
        assert cgroups.runtime_group(runtime.layout.root) == group
        runtime.release()
        assert not group.path.exists()
    finally:
        if group is not None:
            kill_and_remove(group.path)
        runtime.release()


def test_off_means_no_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "run").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    runtime = Runtime.create(state_dir=tmp_path / "state", use_cgroups=False)
    try:
        assert runtime.cgroup is None
        assert cgroups.runtime_group(runtime.layout.root) is None
    finally:
        runtime.release()
