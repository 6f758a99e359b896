"""``discovery.json``: how clients and the CLI find a running Local runtime."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DISCOVERY_SCHEMA_VERSION = 1
# Set by the runtime and inherited by its workers and commands: finds leftovers after a crash.
RUNTIME_ENV = "ZODEX_RUNTIME_ID"


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    from datetime import UTC, datetime  # here: the stdio bridge reads discovery files and must start fast

    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Discovery:
    runtime_id: str
    pid: int
    pid_start: int | None  # with pid, names the runtime process even if the pid is reused
    start_directory: str
    started_at: str
    expires_at: str | None
    mcp: dict[str, str]  # {"url", "token_path"}
    runtime_dir: str  # sockets, worker registry: where leftovers are found after a crash
    observability: dict[str, Any] = field(default_factory=dict)
    schema_version: int = DISCOVERY_SCHEMA_VERSION

    def write(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f, indent=2)
            f.write("\n")
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> Discovery | None:
        try:
            data = json.loads(path.read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None


@dataclass(frozen=True)
class OwnedProcess:
    kind: str  # "runtime" | "tunnel"
    pid: int
    start: int | None


def write_owned(path: Path, processes: list[OwnedProcess]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps([asdict(p) for p in processes]))
    os.replace(tmp, path)


def read_owned(path: Path) -> list[OwnedProcess]:
    try:
        return [OwnedProcess(**item) for item in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        return []
