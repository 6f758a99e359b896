"""Throwaway local accounts for Sprite tests (root only).

:func:`throwaway_account` makes an account with a unique name (``zt<random>``), its own
group, a home and bash as its shell, and removes it — after killing every process it runs —
whatever happens in the test. :func:`runnable_install` makes a virtual environment under
``/tmp`` that any account can run, with the project and the test interpreter's packages
importable through a ``.pth`` file: what ``zodex sprite setup`` installs under
``sprite.install-dir``, made in a second instead of copied. Both live in
``scripts/fleet_harness.py``, which the benchmark shares; here what the machine cannot do
becomes a skip.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import fleet_harness
from scripts.fleet_harness import Account, kill_processes_of, processes_of

__all__ = [
    "PROJECT_ROOT",
    "Account",
    "kill_processes_of",
    "processes_of",
    "require_root",
    "runnable_install",
    "throwaway_account",
]

PROJECT_ROOT = fleet_harness.PROJECT_ROOT


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("Sprite runs commands as other accounts: needs root (CI runs as root)")


def throwaway_account(
    prefix: str = "zt", *, shell: str = "/bin/bash"
) -> contextlib.AbstractContextManager[Account]:
    require_root()
    return fleet_harness.throwaway_account(prefix, shell=shell)


@contextlib.contextmanager
def runnable_install() -> Iterator[Path]:
    """A venv every account can run, with Zodex importable; yields its directory."""
    try:
        fleet_harness.install_python()
    except fleet_harness.Unavailable as exc:
        pytest.skip(str(exc))
    with fleet_harness.runnable_install() as venv:
        yield venv
