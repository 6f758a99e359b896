"""The accounts of a Sprite (docs/sprite.md#files-and-modes), made with shadow-utils.

- the **group** (default ``zodex``): may read the config file; the service account's primary
  group; the agent account is never in it;
- the **service account** (default ``zodex``): a system account with no login shell and no
  home of its own; owns the state directory and the key;
- the **agent account** (default ``zodex-agent``): every command runs as it; a home, the
  login shell ``/bin/bash``, its own group and no other, so no sudo.

An account that already exists is kept as it is, after checks that it can play its part
(never root, never an administrator, the agent outside the service's group). Everything is
checked before anything is made, so a refused setup changes nothing.
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.config.units import ConfigError

AGENT_SHELL = "/bin/bash"
NO_LOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")
# Groups that grant administration (sudo, wheel, admin, root) or read the system logs (adm).
ADMIN_GROUPS = ("root", "sudo", "wheel", "admin", "adm")


class AccountError(ConfigError):
    """An account cannot be made or used as asked; one line."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: Path


def lookup_user(name: str) -> Account | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def lookup_group(name: str) -> int | None:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def groups_of(account: Account) -> set[str]:
    """Every group the account is in: its primary group and the supplementary ones."""
    names = {entry.gr_name for entry in grp.getgrall() if account.name in entry.gr_mem}
    try:
        names.add(grp.getgrgid(account.gid).gr_name)
    except KeyError:
        pass
    return names


def nologin_shell() -> str:
    return next((shell for shell in NO_LOGIN_SHELLS if os.access(shell, os.X_OK)), "/bin/false")


def check_existing(service_user: str, agent_user: str, group: str) -> None:
    """Refuse accounts that exist but cannot play their part, before anything is changed."""
    agent = lookup_user(agent_user)
    if agent is not None:
        if agent.uid == 0:
            raise AccountError(f"agent account {agent_user} has uid 0; choose another --agent-user")
        member = groups_of(agent)
        admin = sorted(member & set(ADMIN_GROUPS))
        if admin:
            raise AccountError(
                f"agent account {agent_user} is in the privileged group(s) {', '.join(admin)}; "
                f"remove it (gpasswd -d {agent_user} {admin[0]}) or choose another --agent-user"
            )
        if group in member:
            raise AccountError(
                f"agent account {agent_user} is in group {group}, which may read the config; "
                f"remove it (gpasswd -d {agent_user} {group}) or choose another --agent-user"
            )
    service = lookup_user(service_user)
    if service is not None and service.uid == 0:
        raise AccountError(f"service account {service_user} has uid 0; choose another --service-user")
    if agent is not None and service is not None and agent.uid == service.uid:
        raise AccountError(f"{service_user} and {agent_user} are the same uid {agent.uid}; they must differ")


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        raise AccountError(f"{' '.join(argv)} failed: {reason[-1] if reason else f'exit {done.returncode}'}")


def ensure_group(name: str) -> tuple[int, bool]:
    """The group's gid, and whether it was made now."""
    gid = lookup_group(name)
    if gid is not None:
        return gid, False
    _run(["groupadd", "--system", name])
    made = lookup_group(name)
    if made is None:
        raise AccountError(f"groupadd made no group {name}")
    return made, True


def ensure_service_user(name: str, group: str, home: Path) -> tuple[Account, bool]:
    """A system account in ``group``, without a login shell; ``home`` is only recorded."""
    existing = lookup_user(name)
    if existing is not None:
        if group not in groups_of(existing):
            _run(["usermod", "--append", "--groups", group, name])
        return existing, False
    _run(
        [
            "useradd",
            "--system",
            "--gid",
            group,
            "--no-create-home",
            "--home-dir",
            str(home),
            "--shell",
            nologin_shell(),
            "--comment",
            "Zodex Sprite service",
            name,
        ]
    )
    return _made(name), True


def ensure_agent_user(name: str, home: Path) -> tuple[Account, bool]:
    """A login account with its own group only, a home and bash."""
    existing = lookup_user(name)
    if existing is not None:
        return existing, False
    _run(
        [
            "useradd",
            "--create-home",
            "--home-dir",
            str(home),
            "--shell",
            AGENT_SHELL,
            "--user-group",
            "--comment",
            "Zodex Sprite agent",
            name,
        ]
    )
    return _made(name), True


def _made(name: str) -> Account:
    account = lookup_user(name)
    if account is None:
        raise AccountError(f"useradd made no account {name}")
    return account
