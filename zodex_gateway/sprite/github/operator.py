"""``zodex sprite github …``: the operator's side (docs/github.md#operator-commands), as root.

``setup`` checks every input — the config, the keys, and both Apps against GitHub — before
it changes anything, so a refused setup leaves the host as it was; run again, it rewrites
the same files. ``yolo``, ``default`` and ``status`` read and write the publisher's YOLO
state, which no token ever enters.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zodex_gateway.config.units import ConfigError
from zodex_gateway.sprite.accounts import lookup_user, nologin_shell
from zodex_gateway.sprite.settings import load_settings, read_document
from zodex_gateway.sprite.setup import render_config

from .api import GitHubApi, GitHubError
from .config import GitHubConfig, check_github_value, parse_github
from .device import poll_for_token, start
from .grants import grant_lines, grant_records
from .provision import configure_agent_git, publisher_argv, write_agent_commands, write_publisher_dir
from .revocation import revoke
from .state import CLIENT_SECRET, Grant, PublisherDir, StateError, YoloState, checked_repos

__all__ = [
    "GitHubSetupError",
    "github_setup",
    "grant_push",
    "list_grant_lines",
    "load_github",
    "revoke_push",
    "set_default",
    "set_yolo",
    "status_lines",
]

DEFAULT_YOLO_TTL = 2 * 3600


class GitHubSetupError(ConfigError):
    """One line; nothing was changed."""


@dataclass(frozen=True)
class Checked:
    config: GitHubConfig
    table: dict[str, Any]
    reader_key: bytes
    publisher_key: bytes
    ca: bytes | None
    reader_slug: str
    publisher_slug: str
    client_secret: str | None


def _read_pem(what: str, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GitHubSetupError(f"{what} {path}: {exc.strerror}") from None
    if b"PRIVATE KEY-----" not in data or len(data) > 64 * 1024:
        raise GitHubSetupError(f"{what} {path} is not a PEM private key")
    return data


def check_setup(config_path: Path, flags: Mapping[str, object], keys: Mapping[str, Path | None]) -> Checked:
    """Everything ``setup`` needs, checked, GitHub included; nothing written."""
    document = read_document(config_path)
    table = dict(document.get("github") or {})
    for leaf, raw in flags.items():
        if raw is not None:
            table[leaf] = check_github_value(leaf, raw)
    config = parse_github({"github": table})
    assert config is not None
    reader_path, publisher_path, secret_path = keys["reader"], keys["publisher"], keys.get("client-secret")
    assert reader_path is not None and publisher_path is not None
    reader_key = _read_pem("--reader-key", reader_path)
    publisher_key = _read_pem("--publisher-key", publisher_path)
    client_secret = None
    if secret_path is not None:
        try:
            client_secret = secret_path.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise GitHubSetupError(f"--publisher-client-secret-file {secret_path}: {exc}") from None
        if not (
            client_secret
            and len(client_secret) <= 200
            and client_secret.isascii()
            and client_secret.isalnum()
        ):
            raise GitHubSetupError(
                f"--publisher-client-secret-file {secret_path} does not hold a client secret"
            )
    ca = None
    if config.ca_file is not None:
        try:
            ca = config.ca_file.read_bytes()
        except OSError as exc:
            raise GitHubSetupError(f"github.ca-file {config.ca_file}: {exc.strerror}") from None
    api = GitHubApi(config.api_url, config.web_url, config.ca_file)
    try:
        reader = api.app(config.reader_app_id, reader_key)
        if int(reader.get("id", 0)) != config.reader_app_id:
            raise GitHubSetupError(
                f"the reader key belongs to App {reader.get('id')}, not {config.reader_app_id}"
            )
        api.installation(config.reader_app_id, reader_key, config.reader_installation_id)
        api.installation_token(
            config.reader_app_id, reader_key, config.reader_installation_id, {"contents": "read"}
        )
        writer = api.app(config.publisher_app_id, publisher_key)
        if int(writer.get("id", 0)) != config.publisher_app_id:
            raise GitHubSetupError(
                f"the publisher key belongs to App {writer.get('id')}, not {config.publisher_app_id}"
            )
        if writer.get("client_id") != config.publisher_client_id:
            raise GitHubSetupError(
                f"client id {config.publisher_client_id} does not belong to the writer App {config.publisher_app_id}"
            )
        api.device_code(config.publisher_client_id)
    except GitHubError as exc:
        raise GitHubSetupError(str(exc)) from None
    slugs = (str(reader.get("slug")), str(writer.get("slug")))
    return Checked(config, table, reader_key, publisher_key, ca, *slugs, client_secret)


def _ensure_publisher_account(name: str, home: Path, say: Callable[[str], None]) -> tuple[int, int]:
    found = lookup_user(name)
    if found is None:
        done = subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", str(home),
             "--shell", nologin_shell(), "--comment", "Zodex GitHub publisher", name],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise GitHubSetupError(f"useradd {name} failed: {done.stderr.strip()}")
        found = lookup_user(name)
        assert found is not None
        say(f"publisher account {name} created (uid {found.uid})")
    return found.uid, found.gid


def _write_config(path: Path, document: dict[str, Any]) -> None:
    """The config file with its ``[github]`` table, owner and mode kept."""
    before = path.stat()
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.write(fd, render_config(document).encode())
        os.fchown(fd, before.st_uid, before.st_gid)
        os.fchmod(fd, before.st_mode & 0o777)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def render_publisher_unit(config: GitHubConfig, python: Path) -> str:
    runtime = ""
    if config.socket.parent.parent == Path("/run"):
        runtime = f"RuntimeDirectory={config.socket.parent.name}\nRuntimeDirectoryMode=0755\n"
    return f"""\
# Written by `zodex sprite github setup`; run it again rather than editing this file.
[Unit]
Description=Zodex GitHub publisher: the keys and tokens the agent never holds

[Service]
Type=simple
User={config.publisher_user}
ExecStart={shlex.join(publisher_argv(python, config.publisher_dir, config.socket))}
{runtime}Restart=on-failure
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={config.publisher_dir} {config.socket.parent}
PrivateTmp=yes
SyslogIdentifier=zodex-publisher

[Install]
WantedBy=multi-user.target
"""


def github_setup(
    config_path: Path,
    flags: Mapping[str, object],
    keys: Mapping[str, Path | None],
    say: Callable[[str], None],
) -> GitHubConfig:
    if os.geteuid() != 0:
        raise GitHubSetupError("zodex sprite github setup must run as root")
    sprite = load_settings(config_path)
    agent = lookup_user(sprite.agent_user)
    if agent is None:
        raise GitHubSetupError(
            f"agent account {sprite.agent_user} does not exist: run `zodex sprite setup` first"
        )
    checked = check_setup(config_path, flags, keys)
    config = checked.config
    say(
        f"reader App {checked.reader_slug} and writer App {checked.publisher_slug} checked against {config.api_url}"
    )

    owner = _ensure_publisher_account(config.publisher_user, config.publisher_dir, say)
    settings = {
        "api_url": config.api_url,
        "web_url": config.web_url,
        "reader_app_id": config.reader_app_id,
        "reader_installation_id": config.reader_installation_id,
        "publisher_app_id": config.publisher_app_id,
        "publisher_client_id": config.publisher_client_id,
        "agent_uids": [agent.uid],
        "default_base": config.default_base,
        "branch_prefix": config.branch_prefix,
        "max_push_bytes": config.max_push_bytes,
    }
    write_publisher_dir(
        config.publisher_dir, owner, settings, checked.reader_key, checked.publisher_key, checked.ca
    )
    if checked.client_secret is not None:  # given once, kept when setup runs again without it
        PublisherDir(config.publisher_dir).write_file(CLIENT_SECRET, checked.client_secret.encode(), owner)
    config.socket.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chown(config.socket.parent, *owner)
    config.socket.parent.chmod(0o755)
    config.bin_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    for path in write_agent_commands(config.bin_dir, sprite.worker_python):
        say(f"agent command {path}")
    configure_agent_git(agent.home, agent.uid, agent.gid, config.socket)
    say(f"{agent.home}/.gitconfig: github.com URLs go through git-remote-zodex")
    document = read_document(config_path)
    document["github"] = checked.table
    _write_config(config_path, document)
    unit_file = config_path.parent / "zodex-publisher.service"
    unit_file.write_text(render_publisher_unit(config, sprite.worker_python))
    unit_file.chmod(0o644)
    from zodex_gateway.sprite import unit

    if unit.systemd_is_init():
        for command in unit.install_unit(unit_file, "zodex-publisher.service"):
            say(f"ran: {command}")
        subprocess.run(["systemctl", "restart", "zodex-publisher.service"], check=False)
        say("started: zodex-publisher.service")
    else:
        say(f"systemd is not PID 1 here, so the unit was only written: {unit_file}")
        argv = publisher_argv(sprite.worker_python, config.publisher_dir, config.socket)
        say(f"run this under the host's supervisor as {config.publisher_user}: {shlex.join(argv)}")
    return config


def load_github(config_path: Path) -> GitHubConfig:
    config = parse_github(read_document(config_path))
    if config is None:
        raise GitHubSetupError(f"{config_path} has no [github] table: run `zodex sprite github setup` first")
    return config


def _owner(config: GitHubConfig) -> tuple[int, int]:
    found = lookup_user(config.publisher_user)
    if found is None:
        raise GitHubSetupError(
            f"publisher account {config.publisher_user} does not exist: run `zodex sprite github setup`"
        )
    return found.uid, found.gid


def _when(epoch: float | None) -> str:
    return "none" if epoch is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def set_yolo(config: GitHubConfig, repos: list[str], ttl: int | None) -> list[str]:
    """YOLO for ``repos`` (merged with the repos already in it, each keeping its own
    expiry) or, with none, for every repo of the writer App's installations."""
    try:
        checked = checked_repos(repos)
    except StateError as exc:
        raise GitHubSetupError(str(exc)) from None
    directory = PublisherDir(config.publisher_dir)
    state = directory.yolo()
    expires = None if ttl is None else time.time() + ttl
    if checked:
        for repo in checked:
            state.repos[repo] = expires
    else:
        state.everything, state.everything_expires = True, expires
    directory.write_yolo(state, _owner(config))
    lines = ["github-mode: yolo", f"ttl: {'none' if ttl is None else f'{ttl}s'}", "token-exposure: none"]
    if checked:
        lines += ["scope: repo-allowlist", *(f"repo: {repo}" for repo in checked)]
    else:
        lines.append("scope: all-installed")
    return [*lines, f"expires-at: {_when(expires)}", "direct-git-push-refs: refs/heads/* refs/tags/*"]


def set_default(config: GitHubConfig) -> list[str]:
    PublisherDir(config.publisher_dir).write_yolo(YoloState(), _owner(config))
    return ["github-mode: default", "yolo-state: removed", "push-grants: unchanged"]


def status_lines(config: GitHubConfig) -> list[str]:
    directory = PublisherDir(config.publisher_dir)
    try:
        state = directory.yolo()
    except StateError as exc:
        return [f"github-mode: unknown ({exc})"]
    now = time.time()
    live = {repo: at for repo, at in state.repos.items() if at is None or at > now}
    everything = state.everything and (state.everything_expires is None or state.everything_expires > now)
    lines = [f"publisher-socket: {config.socket} ({'present' if config.socket.is_socket() else 'absent'})"]
    if everything:
        lines += [
            "github-mode: yolo",
            "scope: all-installed",
            f"expires-at: {_when(state.everything_expires)}",
        ]
    elif live:
        lines += ["github-mode: yolo", "scope: repo-allowlist"]
        lines += [f"repo-expires-at: {repo} {_when(at)}" for repo, at in sorted(live.items())]
    elif state.active():
        lines += ["github-mode: default", "yolo-state: expired", "direct-git-push: disabled"]
    else:
        lines += ["github-mode: default", "direct-git-push: disabled"]
    grants = [grant for grant in directory.grants() if grant.live(now)]
    lines.append(f"push-grants: {len(grants)}")
    return lines


def github_summary(config_path: Path) -> dict[str, Any] | None:
    """What ``zodex sprite status`` and ``health`` tell of GitHub (docs/github.md): the mode,
    whether the publisher's socket is there, the live push grants; None when not set up."""
    config = parse_github(read_document(config_path))
    if config is None:
        return None
    told = dict(line.split(": ", 1) for line in status_lines(config) if ": " in line)
    grants = told.get("push-grants", "")
    return {
        "mode": told.get("github-mode", "unknown"),
        "publisher_socket": config.socket.is_socket(),
        "push_grants": int(grants) if grants.isdigit() else None,
    }


def _checked_repo(repo: str) -> str:
    try:
        return checked_repos([repo])[0]
    except StateError as exc:
        raise GitHubSetupError(str(exc)) from None


def grant_push(config: GitHubConfig, repo: str, ttl: int | None, say: Callable[[str], None]) -> list[str]:
    """The operator's push grant: the same Device Flow, waited for here."""
    repo = _checked_repo(repo)
    directory = PublisherDir(config.publisher_dir)
    api = GitHubApi(config.api_url, config.web_url, directory.ca_file)
    try:
        api.repo_installation(config.publisher_app_id, directory.publisher_key(), repo)
    except (GitHubError, StateError) as exc:
        raise GitHubSetupError(
            f"repo is not covered by the writer App's installation: {repo} ({exc})"
        ) from None
    try:
        code = start(api, config.publisher_client_id)
        say(f"verification-uri: {code.verification_uri}")
        say(f"user-code: {code.user_code}")
        say("waiting for approval (Ctrl-C stops)")
        token = poll_for_token(api, config.publisher_client_id, code)
    except GitHubError as exc:
        raise GitHubSetupError(str(exc)) from None
    now = time.time()
    grant = Grant(repo, token, now, None if ttl is None else now + ttl, "operator")
    directory.write_grant(grant, _owner(config))
    return ["grant-push: active", f"repo: {repo}", f"expires-at: {_when(grant.expires_at)}"]


def revoke_push(config: GitHubConfig, repo: str) -> list[str]:
    directory = PublisherDir(config.publisher_dir)
    removed = directory.remove_grant(_checked_repo(repo))
    at_github = "no token"
    if removed is not None:
        api = GitHubApi(config.api_url, config.web_url, directory.ca_file)
        at_github = revoke(api, directory, config.publisher_client_id, removed.token)
    return [
        f"revoke-push: {'revoked' if removed else 'no grant'}",
        f"repo: {repo}",
        f"github-revocation: {at_github}",
    ]


def list_grant_lines(config: GitHubConfig) -> list[str]:
    return grant_lines(grant_records(PublisherDir(config.publisher_dir).grants(), time.time()), [])
