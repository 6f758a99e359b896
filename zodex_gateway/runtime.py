"""A runtime's private directory, key and owner lock, as seen from a gateway.

A gateway either **owns** a fresh runtime (the default for a foreground gateway, and what
``zodex local start`` does) or **joins** an existing one (``--runtime-dir``), so two
gateways — say stdio and HTTP — share the same workers and sessions.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from zodex_protocol.envelope import create_key_file, read_key_file
from zodex_protocol.layout import RuntimeLayout, default_runtime_root
from zodex_protocol.limits import Limits


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "zodex" / "local"


def default_shell() -> list[str]:
    """Local mode runs ``$SHELL -c <cmd>`` (docs/modes.md#environment-of-a-command)."""
    shell = os.environ.get("SHELL") or "/bin/sh"
    if not os.path.isabs(shell) or not os.access(shell, os.X_OK):
        shell = "/bin/sh"
    return [shell, "-c"]


def worker_argv() -> list[str]:
    """How to start a worker; ``ZODEX_WORKER_ARGV`` (a JSON list) replaces it in tests."""
    override = os.environ.get("ZODEX_WORKER_ARGV")
    if override:
        value = json.loads(override)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("ZODEX_WORKER_ARGV must be a JSON list of strings")
        return value
    return [sys.executable, "-m", "zodex_worker.main"]


@dataclass
class Runtime:
    runtime_id: str
    layout: RuntimeLayout
    key: bytes
    state_dir: Path
    limits: Limits = field(default_factory=Limits)
    shell: list[str] = field(default_factory=default_shell)
    owner: bool = False
    _lock_fd: int | None = None

    @property
    def spill_dir(self) -> Path:
        return self.state_dir / "spill"

    @classmethod
    def create(cls, *, state_dir: Path | None = None, limits: Limits | None = None) -> Runtime:
        runtime_id = secrets.token_hex(6)
        layout = RuntimeLayout(default_runtime_root() / runtime_id)
        layout.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        layout.create()
        key = create_key_file(layout.key_file)
        lock_fd = os.open(layout.runtime_lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # released by the kernel however we exit
        return cls(
            runtime_id=runtime_id,
            layout=layout,
            key=key,
            state_dir=state_dir or default_state_dir(),
            limits=limits or Limits(),
            owner=True,
            _lock_fd=lock_fd,
        )

    @classmethod
    def join(cls, root: Path, *, state_dir: Path | None = None, limits: Limits | None = None) -> Runtime:
        layout = RuntimeLayout(root)
        if not layout.key_file.exists():
            raise FileNotFoundError(f"no Zodex runtime at {root}")
        return cls(
            runtime_id=root.name,
            layout=layout,
            key=read_key_file(layout.key_file),
            state_dir=state_dir or default_state_dir(),
            limits=limits or Limits(),
        )

    def release(self) -> None:
        """Owner only: drop the lock (workers notice and stop) and remove the directory."""
        if not self.owner:
            return
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.layout.root)
