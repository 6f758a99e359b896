"""A host's incarnations (docs/fleet.md#handles-across-hosts): a fresh one at each start,
never one it had before, remembered so that a restarted host answers its old handles
*lost* and handles it never issued *unknown*."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from zodex_protocol.handles import check_host_incarnation, new_host_incarnation

KEPT = 4096  # 28 KiB of file; a host restarted more often than that forgets the oldest


def earlier_incarnations(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return []
    kept = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            kept.append(check_host_incarnation(line.strip()))
    return kept[-KEPT:]


def start_incarnation(path: Path) -> tuple[str, set[str]]:
    """A new incarnation, recorded (atomically) before it is used, and the earlier ones."""
    earlier = earlier_incarnations(path)
    current = new_host_incarnation(set(earlier))
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write("".join(f"{value}\n" for value in [*earlier, current][-KEPT:]))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)
    return current, set(earlier)
