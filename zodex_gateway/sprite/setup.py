"""``zodex sprite setup``: make or repair a Sprite on this host (docs/sprite.md#operator-cli).

Every input is checked before anything is made, so a refused setup changes nothing. Run
again, it keeps the key and the accounts, takes the flags given as changes to the config
file, and puts every owner and mode of docs/sprite.md#files-and-modes back.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from zodex_gateway.config.units import ConfigError

from . import accounts, install, unit
from .key import KeyRefused, new_key, read_key, write_key
from .settings import (
    SpriteSettings,
    check_sprite_value,
    parse_document,
    read_document,
)


class SetupError(ConfigError):
    """Setup cannot go on; one line."""


@dataclass
class SetupRequest:
    """The flags of ``setup``: ``sprite.*`` keys to record (kebab-case leaf → text or int),
    and where the agent's home goes when the account is made now."""

    config_path: Path
    changes: dict[str, object] = field(default_factory=dict)
    agent_home: Path | None = None


@dataclass
class SetupResult:
    settings: SpriteSettings
    connector_url: str
    unit_file: Path
    unit_installed: bool
    notes: list[str]
    zodex: Path  # <install-dir>/bin/zodex: the Zodex to run from now on


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise SetupError(f"zodex sprite {what} must run as root")


def desired_document(request: SetupRequest) -> dict[str, Any]:
    """The config file as it will be: the present one (if any) with the flags applied."""
    document: dict[str, Any] = read_document(request.config_path) if request.config_path.exists() else {}
    table = dict(document.get("sprite", {}))
    for leaf, raw in request.changes.items():
        name = f"sprite.{leaf}"
        value = check_sprite_value(name, raw)  # named by its key; a bad flag stops here
        table[leaf] = raw if isinstance(value, tuple) else value  # hosts stay as the operator wrote them
    document["sprite"] = table
    return document


def render_config(document: Mapping[str, Any]) -> str:
    header = (
        "# Zodex Sprite configuration (docs/sprite.md#config), written by `zodex sprite setup`.\n"
        "# Non-secret settings only: the key is in <state-dir>/key. Keys left out take their default.\n"
    )
    ordered = {"sprite": document["sprite"], **{k: v for k, v in document.items() if k != "sprite"}}
    return f"{header}\n{tomli_w.dumps(ordered)}"


def _write_atomic(path: Path, text: str, uid: int, gid: int, mode: int) -> None:
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchown(out.fileno(), uid, gid)
            os.fchmod(out.fileno(), mode)
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _own_dir(path: Path, uid: int, gid: int, mode: int, notes: list[str]) -> None:
    """Make ``path`` (and missing parents, root-owned 0755) a real directory with these
    owners and mode; a link or a file in its place is refused."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise SetupError(f"{path} exists and is not a directory; move it away and run setup again")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        path.mkdir(mode=mode)
        os.chown(path, uid, gid)
        os.chmod(path, mode)  # mkdir's mode passes through the umask
        return
    info = path.lstat()
    if stat.S_IMODE(info.st_mode) != mode:
        notes.append(f"repaired {path}: mode {stat.S_IMODE(info.st_mode):04o} → {mode:04o}")
        os.chmod(path, mode, follow_symlinks=False)
    if (info.st_uid, info.st_gid) != (uid, gid):
        notes.append(f"repaired {path}: owner {info.st_uid}:{info.st_gid} → {uid}:{gid}")
        os.chown(path, uid, gid, follow_symlinks=False)


def _check_inputs(settings: SpriteSettings, request: SetupRequest) -> None:
    """What the settings alone cannot say: files that must exist, the agent's home."""
    for name, path in (("--tls-cert", settings.tls_cert), ("--tls-key", settings.tls_key)):
        if path is not None and not path.is_file():
            raise SetupError(f"{name}: no such file: {path}")
    if request.agent_home is not None:
        check_sprite_value("sprite.workspace", str(request.agent_home))  # same rules as any path
    distinct = {settings.state_dir, settings.workspace, settings.install_dir, settings.runtime_dir}
    if len(distinct) < 4:
        raise SetupError(
            "workspace, state-dir, runtime-dir and install-dir must be four different directories"
        )
    for inner, outer in ((settings.state_dir, settings.workspace), (settings.workspace, settings.state_dir)):
        if inner.is_relative_to(outer):
            raise SetupError(
                f"{inner} is inside {outer}: the agent's workspace and the service's state must not nest"
            )
    install.check_install_dir(settings.install_dir)
    accounts.check_existing(settings.service_user, settings.agent_user, settings.group)


def _ensure_key(settings: SpriteSettings, uid: int, gid: int, notes: list[str]) -> str:
    path = settings.key_file
    if path.is_file() and not path.is_symlink():
        info = path.stat()
        if stat.S_IMODE(info.st_mode) & 0o077:
            notes.append(
                f"repaired {path}: mode {stat.S_IMODE(info.st_mode):04o} → 0600; the key was readable by "
                "other accounts, consider `zodex sprite rotate-key`"
            )
        if (info.st_uid, info.st_gid) != (uid, gid) or stat.S_IMODE(info.st_mode) != 0o600:
            os.chown(path, uid, gid)
            os.chmod(path, 0o600)
        try:
            return read_key(path, owner_uid=uid)
        except KeyRefused as exc:
            notes.append(f"replaced the key: {exc}")
    elif path.is_symlink() or path.exists():
        raise SetupError(f"{path} is not a regular file; move it away and run setup again")
    key = new_key()
    write_key(path, key, uid, gid)
    return key


def setup(request: SetupRequest, say: Callable[[str], None]) -> SetupResult:
    require_root("setup")
    document = desired_document(request)
    try:
        settings = parse_document(document, request.config_path)
    except ConfigError as exc:
        raise SetupError(str(exc)) from None
    _check_inputs(settings, request)
    notes: list[str] = []

    gid, made = accounts.ensure_group(settings.group)
    if made:
        say(f"group {settings.group} created (gid {gid})")
    service, made = accounts.ensure_service_user(settings.service_user, settings.group, settings.state_dir)
    if made:
        say(f"service account {service.name} created (uid {service.uid})")
    home = request.agent_home or Path("/home") / settings.agent_user
    home.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    agent, made = accounts.ensure_agent_user(settings.agent_user, home)
    if made:
        say(f"agent account {agent.name} created (uid {agent.uid}, home {agent.home})")

    _own_dir(settings.workspace, agent.uid, agent.gid, 0o750, notes)
    config_dir = settings.config_path.parent
    if not config_dir.exists():
        config_dir.mkdir(parents=True, mode=0o755)
    _write_atomic(settings.config_path, render_config(document), 0, gid, 0o640)
    _own_dir(settings.state_dir, service.uid, gid, 0o700, notes)
    _own_dir(settings.state_dir / "logs", service.uid, gid, 0o700, notes)
    key = _ensure_key(settings, service.uid, gid, notes)

    installed = install.install_zodex(settings.install_dir, settings.agent_user, settings.service_user)
    say(
        f"Zodex installed in {settings.install_dir} with {installed.distributions} distributions it "
        f"requires, on {installed.python}; {settings.service_user} and {settings.agent_user} import from it"
    )

    # Beside the config, root's: the service account owns the state directory and must not
    # be able to change what root will run.
    unit_file = config_dir / unit.unit_name(settings)
    _write_atomic(unit_file, unit.render_unit(settings), 0, 0, 0o644)
    unit_installed = False
    if unit.systemd_is_init():
        for command in unit.install_unit(unit_file, unit.unit_name(settings)):
            say(f"ran: {command}")
        unit_installed = True
        say(f"start it: systemctl start {unit.unit_name(settings)}")
    else:
        say(f"systemd is not PID 1 here, so the unit was only written: {unit_file}")
        say(f"run this under the host's supervisor: {unit.serve_command(settings)}")
    for note in notes:
        say(note)
    return SetupResult(
        settings, settings.connector_url(key), unit_file, unit_installed, notes, installed.zodex
    )
