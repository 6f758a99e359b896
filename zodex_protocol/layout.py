"""Where a runtime keeps its sockets, keys, locks and worker registry (docs/architecture.md#routing-without-a-table).

``<runtime dir>`` is ``<runtime root>/<runtime_id>`` (``0700``); the root is
``$XDG_RUNTIME_DIR/zodex``, or ``/tmp/zodex-<uid>`` (a private ``/tmp/zodex-<uid>-<random>``
when another account made that name first) when there is no runtime dir
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
                             (``zodex_protocol.tombstones``, 0600; 0640 in Sprite)
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Final

# A record is a few hundred bytes; a larger file is not one (and is not read whole).
MAX_RECORD_BYTES: Final = 64 * 1024
_RECORD_TYPES: Final = {
    "worker_id": (str,),
    "incarnation": (int,),
    "pid": (int,),
    "pid_start": (int, type(None)),
    "workdir": (str,),
    "request_endpoint": (str,),
    "event_endpoint": (str,),
    "protocol": (int,),
}


def read_small_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, never through a symbolic link, at most
    ``limit`` of them; OSError (ValueError when larger) otherwise. Files a worker writes may
    be written by another account than the gateway's (Sprite): they are read this way."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(limit + 1 - size, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ValueError(f"{path} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class RuntimeLayout:
    root: Path

    @cached_property  # checked on every tool call (Supervisor._check_runtime_dir)
    def key_file(self) -> Path:
        return self.root / "key"

    @cached_property  # checked on every tool call (Supervisor._check_runtime_dir)
    def runtime_lock(self) -> Path:
        return self.root / "runtime.lock"

    @cached_property  # checked on every tool call (Supervisor._check_runtime_dir)
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

    def read_record(self, worker_id: str, incarnation: int | None = None) -> WorkerRecord | None:
        """The registry record of ``worker_id`` (its latest, or the ``.started`` record of
        ``incarnation``), or None unless it names that worker and the endpoints this layout
        gives it: a gateway connects only to sockets inside its own runtime directory."""
        path = (
            self.record_file(worker_id) if incarnation is None else self.started_file(worker_id, incarnation)
        )
        record = WorkerRecord.read(path)
        if record is None or record.worker_id != worker_id:
            return None
        if incarnation is not None and record.incarnation != incarnation:
            return None
        if record.request_endpoint != self.request_endpoint(worker_id, record.incarnation):
            return None
        if record.event_endpoint != self.event_endpoint(worker_id, record.incarnation):
            return None
        return record

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
        self._write_all([path])

    def publish(self, layout: RuntimeLayout) -> None:
        """Register this incarnation as started, then as the worker's latest: a handle
        of an incarnation with a ``.started`` record and no ``.exit`` file is *lost*
        once that incarnation is gone (docs/sessions.md#handles)."""
        self._write_all(
            [layout.started_file(self.worker_id, self.incarnation), layout.record_file(self.worker_id)]
        )

    def _write_all(self, paths: list[Path]) -> None:
        """The record in each of ``paths``, in order, each replaced atomically: one file
        written, the others hard links to it (a record is never changed in place)."""
        # Fresh temporary names, never through a link planted in their place.
        temps = [path.with_suffix(f".tmp{os.getpid()}-{secrets.token_hex(4)}") for path in paths]
        fd = os.open(temps[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            try:
                os.write(fd, json.dumps(vars(self)).encode())  # small: one write takes it whole
            finally:
                os.close(fd)
            for temp in temps[1:]:
                os.link(temps[0], temp)
            for temp, path in zip(temps, paths, strict=True):
                os.replace(temp, path)
        finally:
            for temp in temps:
                temp.unlink(missing_ok=True)

    @classmethod
    def read(cls, path: Path) -> WorkerRecord | None:
        """The record in ``path``, or None when it is missing, a link, larger than
        ``MAX_RECORD_BYTES`` or not a record (every field of its type)."""
        try:
            data: Any = json.loads(read_small_file(path, MAX_RECORD_BYTES))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            return None
        for name, kinds in _RECORD_TYPES.items():
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, kinds):
                return None
        if data["pid"] <= 0:
            return None
        return cls(**data)
