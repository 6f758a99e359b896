"""Where a runtime keeps its sockets, keys, locks and worker registry (docs/architecture.md#routing-without-a-table).

``<runtime dir>`` is ``<runtime root>/<runtime_id>`` (``0700``); the root is
``$XDG_RUNTIME_DIR/zodex``, or ``/tmp/zodex-<uid>`` when there is no runtime dir
(``zodex_system.xdg.runtime_root``). Inside it::

    key                      HMAC key of the wire protocol (0600)
    runtime.lock             held exclusively by the runtime's owner for its whole life;
                             workers wait on it to notice the owner is gone
    owner.json               the owner's pid and start time, for a later gateway that
                             finds the directory without a held lock
    w/<worker id>.json       registry record of the worker's latest incarnation
    w/<worker id>-<inc>.started  the record of every incarnation that started (same
                             content); kept, so a handle of a dead one answers *lost*
    w/<worker id>.lock       spawn lock: one spawner per workdir at a time
    w/<worker id>-<inc>.req  ipc endpoint of the worker's ROUTER
    w/<worker id>-<inc>.pub  ipc endpoint of the worker's PUB
    w/<worker id>-<inc>.exit tombstones left by an incarnation that exited cleanly
                             (``zodex_protocol.tombstones``, 0600)
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RuntimeLayout:
    root: Path

    @property
    def key_file(self) -> Path:
        return self.root / "key"

    @property
    def runtime_lock(self) -> Path:
        return self.root / "runtime.lock"

    @property
    def workers_dir(self) -> Path:
        return self.root / "w"

    def record_file(self, worker_id: str) -> Path:
        return self.workers_dir / f"{worker_id}.json"

    def spawn_lock(self, worker_id: str) -> Path:
        return self.workers_dir / f"{worker_id}.lock"

    def request_endpoint(self, worker_id: str, incarnation: int) -> str:
        return f"ipc://{self.workers_dir / f'{worker_id}-{incarnation}.req'}"

    def event_endpoint(self, worker_id: str, incarnation: int) -> str:
        return f"ipc://{self.workers_dir / f'{worker_id}-{incarnation}.pub'}"

    def exit_file(self, worker_id: str, incarnation: int) -> Path:
        return self.workers_dir / f"{worker_id}-{incarnation}.exit"

    def started_file(self, worker_id: str, incarnation: int) -> Path:
        return self.workers_dir / f"{worker_id}-{incarnation}.started"

    @property
    def owner_file(self) -> Path:
        return self.root / "owner.json"

    def create(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.workers_dir.mkdir(mode=0o700, exist_ok=True)


@dataclass(frozen=True)
class WorkerRecord:
    """What a worker publishes about itself once its sockets are bound."""

    worker_id: str
    incarnation: int
    pid: int
    pid_start: int | None  # process start time (clock ticks), so a reused pid is never mistaken for it
    workdir: str
    request_endpoint: str
    event_endpoint: str
    protocol: int

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, path)

    def publish(self, layout: RuntimeLayout) -> None:
        """Register this incarnation as started, then as the worker's latest: a handle
        of an incarnation with a ``.started`` record and no ``.exit`` file is *lost*
        once that incarnation is gone (docs/sessions.md#handles)."""
        self.write(layout.started_file(self.worker_id, self.incarnation))
        self.write(layout.record_file(self.worker_id))

    @classmethod
    def read(cls, path: Path) -> WorkerRecord | None:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None
