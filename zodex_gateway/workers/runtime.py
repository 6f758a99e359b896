"""A runtime's private directory, key and owner lock, as seen from a gateway.

A gateway either **owns** a fresh runtime (the default for a foreground gateway, and what
``zodex local start`` does) or **joins** an existing one (``--runtime-dir``), so two
gateways — say stdio and HTTP — share the same workers and sessions.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from zodex_gateway.workers.runtime_dirs import hold_lock, holds, remove_abandoned_runtimes, write_owner_file
from zodex_protocol.envelope import new_key, read_key_file
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.layout import RuntimeLayout
from zodex_protocol.limits import Limits
from zodex_system import cgroups, runtime_cgroups, xdg
from zodex_system.private_dirs import UnsafeDirectory, make_private_dirs
from zodex_system.secret_files import create_secret_file


def default_shell() -> list[str]:
    """Local mode runs ``$SHELL -c <cmd>`` (docs/modes.md#environment-of-a-command)."""
    shell = os.environ.get("SHELL") or "/bin/sh"
    if not os.path.isabs(shell) or not os.access(shell, os.X_OK):
        shell = "/bin/sh"
    return [shell, "-c"]


def worker_argv_overridden() -> bool:
    return bool(os.environ.get("ZODEX_WORKER_ARGV"))


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
    _stale_lock_fds: list[int] = field(default_factory=list)
    # Owner only: the group that holds every session's cgroup, where the machine allows
    # (docs/sessions.md#process-groups-and-cgroups); None means the marker sweep.
    cgroup: cgroups.Group | None = None

    @property
    def spill_dir(self) -> Path:
        return self.state_dir / "spill"

    @classmethod
    def create(
        cls, *, state_dir: Path | None = None, limits: Limits | None = None, use_cgroups: bool = True
    ) -> Runtime:
        """A fresh runtime owned by this process; ``use_cgroups=False`` (or
        ``ZODEX_CGROUPS=off``) keeps its sessions out of cgroups."""
        runtime_id = secrets.token_hex(6)
        layout = RuntimeLayout(xdg.runtime_root() / runtime_id)
        # Its signing key and sockets go there: refused unless safely the user's.
        make_private_dirs([layout.root.parent], xdg.runtime_base(layout.root.parent))
        layout.create()
        key = new_key()
        create_secret_file(layout.key_file, key)
        lock_fd = hold_lock(layout)  # released by the kernel however we exit
        write_owner_file(layout)
        # Directories of gateways that died without removing theirs (SIGKILL).
        remove_abandoned_runtimes(layout.root.parent, keep=layout.root)
        wanted = use_cgroups and cgroups.wanted()
        group = runtime_cgroups.create_runtime_group(layout.root, runtime_id) if wanted else None
        return cls(
            runtime_id=runtime_id,
            layout=layout,
            key=key,
            state_dir=state_dir or xdg.local_state_dir(),
            limits=limits or Limits(),
            owner=True,
            _lock_fd=lock_fd,
            cgroup=group,
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
            state_dir=state_dir or xdg.local_state_dir(),
            limits=limits or Limits(),
        )

    def restore_directory(self) -> bool:
        """Owner only: make the runtime directory again — same key, a newly held lock,
        the worker registry — when it (or part of it) was removed under the running
        runtime; True when something was missing. The lock held before is kept until
        :meth:`release_stale_locks`: workers waiting on it stop once it is closed."""
        if not self.owner or self._lock_fd is None:
            return False
        layout = self.layout
        if holds(self._lock_fd, layout) and layout.workers_dir.is_dir() and layout.key_file.is_file():
            return False
        try:
            # Removed, it may have been made again by someone else (a shared /tmp).
            make_private_dirs([layout.root.parent], xdg.runtime_base(layout.root.parent))
        except UnsafeDirectory as exc:
            raise ProtocolError(
                ErrorCode.WORKER_UNAVAILABLE,
                f"the runtime directory was removed and cannot be made again: {exc}",
            ) from None
        layout.create()
        with contextlib.suppress(FileExistsError):
            create_secret_file(layout.key_file, self.key)
        if not holds(self._lock_fd, layout):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(layout.runtime_lock)  # not the file we hold: replace it
            self._stale_lock_fds.append(self._lock_fd)
            self._lock_fd = hold_lock(layout)
        write_owner_file(layout)
        if self.cgroup is not None:
            with contextlib.suppress(OSError):  # new workers find their runtime's group here
                runtime_cgroups.record_runtime_group(layout.root, self.cgroup)
        return True

    def release_stale_locks(self) -> None:
        for fd in self._stale_lock_fds:
            os.close(fd)
        self._stale_lock_fds.clear()

    def release(self) -> None:
        """Owner only: drop the lock (workers notice and stop) and remove the directory."""
        if not self.owner:
            return
        self.release_stale_locks()
        if self.cgroup is not None:
            # The workers are stopped by now; anything still in a session group is not ours to keep.
            self.cgroup.kill_and_remove()
            runtime_cgroups.remove_runtime_group(self.cgroup)
            self.cgroup = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.layout.root)
