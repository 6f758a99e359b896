"""``zodex sprite status``: whether the service runs, read from what it leaves behind.

The service writes ``<state-dir>/status.json`` (``pid``, ``port``, ``version``,
``started_at``) when it starts serving. A status file whose process is gone, or whose pid
now belongs to a process that is not a Zodex Sprite, means *not running*.

Active sessions are counted from the processes themselves, not asked of the service: every
command carries ``ZODEX_SESSION_HANDLE`` in its environment (docs/modes.md#environment-of-a-command),
so the distinct handles among the agent account's processes are the sessions that still
have a live process. Reading another account's ``/proc/<pid>/environ`` needs root; the count
is ``None`` otherwise.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .accounts import lookup_user
from .settings import SpriteSettings

MAX_STATUS_BYTES = 64 * 1024
SESSION_MARKER = b"ZODEX_SESSION_HANDLE="


@dataclass(frozen=True)
class SpriteStatus:
    running: bool
    reason: str  # why not running, "" when running
    pid: int | None
    port: int | None
    version: str | None
    started_at: str | None
    agent_user: str
    public_url: str
    active_sessions: int | None
    # GitHub's mode and publisher (docs/github.md), None when GitHub is not set up.
    github: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


def _read_status_file(path: Path) -> dict[str, Any] | str:
    """The status file's content, or why there is none to trust."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_STATUS_BYTES + 1)
    except FileNotFoundError:
        return f"no status file at {path} (the service has not started)"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if len(data) > MAX_STATUS_BYTES:
        return f"{path} is too large to be a status file"
    try:
        found = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f"{path} is not JSON"
    if not isinstance(found, dict) or not isinstance(found.get("pid"), int) or isinstance(found["pid"], bool):
        return f"{path} names no pid"
    return found


def is_sprite_process(pid: int, service_uid: int | None = None) -> bool:
    """The pid is alive and runs ``… sprite serve …`` (a pid reused by another program is not
    ours) and, with ``service_uid``, as the service account: the agent can start a process
    with any command line, and could otherwise pass for a service that is gone."""
    try:
        # Not the owner of /proc/<pid>: that is root for a process that dropped root.
        if service_uid is not None and _real_uid(pid) != service_uid:
            return False
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"sprite" in argv and b"serve" in argv


def _real_uid(pid: int) -> int | None:
    with open(f"/proc/{pid}/status", "rb") as status:
        for line in status:
            if line.startswith(b"Uid:"):
                return int(line.split()[1])
    return None


def count_sessions(agent_user: str) -> int | None:
    """Distinct session handles among the agent's processes; None when that cannot be read."""
    account = lookup_user(agent_user)
    if account is None:
        return 0
    handles: set[bytes] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != account.uid:
                continue
            environ = Path(entry.path, "environ").read_bytes()
        except FileNotFoundError:
            continue  # gone meanwhile
        except PermissionError:
            return None
        for variable in environ.split(b"\0"):
            if variable.startswith(SESSION_MARKER):
                handles.add(variable[len(SESSION_MARKER) :])
    return len(handles)


def _optional(found: dict[str, Any], name: str, kind: type) -> Any:
    value = found.get(name)
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def sprite_status(settings: SpriteSettings) -> SpriteStatus:
    from zodex_gateway.sprite.github.operator import github_summary

    found = _read_status_file(settings.status_file)
    common = {"agent_user": settings.agent_user, "public_url": settings.base_url()}
    github = github_summary(settings.config_path)
    if isinstance(found, str):
        return SpriteStatus(
            False, found, None, None, None, None, active_sessions=None, github=github, **common
        )
    pid = int(found["pid"])
    service = lookup_user(settings.service_user)
    if service is None or not is_sprite_process(pid, service.uid):
        return SpriteStatus(
            False,
            f"the service (pid {pid}) is gone",
            pid,
            _optional(found, "port", int),
            _optional(found, "version", str),
            _optional(found, "started_at", str),
            active_sessions=None,
            github=github,
            **common,
        )
    return SpriteStatus(
        True,
        "",
        pid,
        _optional(found, "port", int),
        _optional(found, "version", str),
        _optional(found, "started_at", str),
        active_sessions=count_sessions(settings.agent_user),
        github=github,
        **common,
    )
