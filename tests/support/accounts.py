"""Throwaway local accounts for Sprite tests (root only).

:func:`throwaway_account` makes an account with a unique name (``zt<random>``), its own
group, a home and bash as its shell, and removes it — after killing every process it runs —
whatever happens in the test. :func:`runnable_install` makes a virtual environment under
``/tmp`` that any account can run, with the project and the test interpreter's packages
importable through a ``.pth`` file: what ``zodex sprite setup`` installs under
``sprite.install-dir``, made in a second instead of copied.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: Path


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("Sprite runs commands as other accounts: needs root (CI runs as root)")


def processes_of(uid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"State:") and b"Z" in line.split()[1]:
                        break
                    if line.startswith(b"Uid:"):
                        if uid in (int(line.split()[1]), int(line.split()[2])):
                            found.append(int(entry.name))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return found


def kill_processes_of(uid: int) -> None:
    for _ in range(20):
        left = processes_of(uid)
        if not left:
            return
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not processes_of(uid), timeout=2.0, what="the account's processes to go")


@contextlib.contextmanager
def throwaway_account(prefix: str = "zt", *, shell: str = "/bin/bash") -> Iterator[Account]:
    require_root()
    name = f"{prefix}{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--create-home", "--user-group", "--shell", shell, name],
        check=True,
        capture_output=True,
    )
    try:
        entry = pwd.getpwnam(name)
        yield Account(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
    finally:
        with contextlib.suppress(KeyError):
            kill_processes_of(pwd.getpwnam(name).pw_uid)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(["groupdel", name], capture_output=True, check=False)


@contextlib.contextmanager
def runnable_install() -> Iterator[Path]:
    """A venv every account can run, with Zodex importable; yields its directory."""
    root = Path(tempfile.mkdtemp(prefix="zodex-install-", dir="/tmp"))
    root.chmod(0o755)
    try:
        base = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
        if not os.access(base, os.X_OK):
            pytest.skip(f"no {base} that other accounts can run")
        venv = root / "venv"
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
        site = next((venv / "lib").glob("python3.*/site-packages"))
        paths = [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        (site / "zodex-tests.pth").write_text("\n".join(dict.fromkeys(paths)) + "\n")
        for directory, _subdirs, files in os.walk(root):
            os.chmod(directory, 0o755)
            for name in files:
                path = os.path.join(directory, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o755)
        yield venv
    finally:
        shutil.rmtree(root, ignore_errors=True)
