"""The systemd unit that runs ``zodex sprite serve`` (docs/sprite.md#operator-cli).

The unit starts the service as root: ``serve`` itself splits into the unprivileged,
network-facing service and the small root helper that starts and kills workers as the agent
account (docs/sprite.md#privilege-separation). Hardening is limited to what that split and
the agent's commands still allow:

- ``NoNewPrivileges=yes``: the service and the helper only ever give privilege up
  (``setresuid`` as root), never gain it through exec, so this costs them nothing; it does
  keep every command of the agent from gaining privilege through a setuid or file-capability
  program (``su``, ``sudo``, ``newuidmap``, …);
- no ``PrivateDevices``, ``ProtectHome`` or ``PrivateTmp``: they would apply to every
  command the agent runs too (its home is under ``/home``, it needs PTYs, and a private
  ``/tmp`` would differ from the one an operator sees);
- ``Delegate=yes`` so the service may give each command its own cgroup (``session.cgroups``);
- ``KillMode=control-group``: stopping the unit kills every process in it, so nothing the
  model started outlives the service.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from .settings import DEFAULT_CONFIG_PATH, SpriteSettings

SYSTEMD_UNIT_DIR = Path("/etc/systemd/system")


def unit_name(settings: SpriteSettings) -> str:
    """``zodex-sprite.service`` for the default service account; one per service account
    otherwise, so Sprites side by side get units of their own."""
    if settings.service_user == "zodex":
        return "zodex-sprite.service"
    return f"zodex-sprite-{settings.service_user}.service"


def serve_argv(settings: SpriteSettings) -> list[str]:
    """The installed ``zodex`` (docs/sprite.md#files-and-modes), which the service account
    can still read after ``serve`` drops root, wherever the ``zodex`` that ran setup lives."""
    return [str(settings.installed_zodex), "sprite", "serve", "--config", str(settings.config_path)]


def serve_command(settings: SpriteSettings) -> str:
    return shlex.join(serve_argv(settings))


def _systemd_quote(argv: list[str]) -> str:
    # systemd splits ExecStart like a shell but knows only its own quoting; double quotes
    # and backslashes cover any path the settings allow (no control characters).
    def quote(word: str) -> str:
        if word and all(ch.isalnum() or ch in "/._-:=+," for ch in word):
            return word
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'

    return " ".join(quote(word) for word in argv)


def render_unit(settings: SpriteSettings) -> str:
    config_note = "" if settings.config_path == DEFAULT_CONFIG_PATH else f" ({settings.config_path})"
    return f"""\
# Written by `zodex sprite setup`; run it again rather than editing this file.
[Unit]
Description=Zodex Sprite: a remote Linux workspace for a model over MCP{config_note}
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart={_systemd_quote(serve_argv(settings))}
Restart=on-failure
RestartSec=2s
KillMode=control-group
TimeoutStopSec=30s
Delegate=yes
NoNewPrivileges=yes
ProtectSystem=full
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectClock=yes
ProtectHostname=yes
LockPersonality=yes
RestrictRealtime=yes
SyslogIdentifier=zodex-sprite

[Install]
WantedBy=multi-user.target
"""


def systemd_is_init() -> bool:
    """Whether systemd manages this machine: PID 1 is systemd (a container's PID 1 rarely is)."""
    try:
        return Path("/proc/1/comm").read_text().strip() == "systemd"
    except OSError:
        return False


def install_unit(path: Path, name: str) -> list[str]:
    """Copy the unit to /etc/systemd/system, reload and enable it; the commands run, for the record."""
    target = SYSTEMD_UNIT_DIR / name
    target.write_text(path.read_text())
    target.chmod(0o644)
    done: list[str] = []
    for argv in (["systemctl", "daemon-reload"], ["systemctl", "enable", name]):
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise OSError(f"{shlex.join(argv)} failed: {(result.stderr or result.stdout).strip()}")
        done.append(shlex.join(argv))
    return done
