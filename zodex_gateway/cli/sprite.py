"""``zodex sprite …``: the operator's commands, run as root on the host (docs/sprite.md#operator-cli).

A thin click layer over ``setup``, ``status``, ``health`` and the key functions. Every
command takes ``--config PATH`` (default ``$ZODEX_SPRITE_CONFIG``, else
``/etc/zodex/config.toml``) and exits 0 on success, 1 on failure with one line saying why.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from zodex_gateway.config.units import ConfigError
from zodex_gateway.sprite.accounts import lookup_user
from zodex_gateway.sprite.key import KeyRefused, new_key, read_key, write_key
from zodex_gateway.sprite.settings import SpriteSettings, default_config_path, load_settings

_F = TypeVar("_F", bound=Callable[..., Any])


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _config_option(command: _F) -> _F:
    option = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, readable=False, path_type=Path),
        default=None,
        help="The config file (default: $ZODEX_SPRITE_CONFIG, else /etc/zodex/config.toml).",
    )
    return option(command)


def _config_path(given: Path | None) -> Path:
    path = given if given is not None else default_config_path()
    if not path.is_absolute():
        path = Path.cwd() / path
    return path


def _settings(given: Path | None) -> SpriteSettings:
    try:
        return load_settings(_config_path(given))
    except ConfigError as exc:
        fail(str(exc))


def _root_settings(what: str, given: Path | None) -> SpriteSettings:
    """The settings of a command that reads the key: refused unless run as root."""
    if os.geteuid() != 0:
        fail(
            f"zodex sprite {what} must run as root (the key is readable only by root and the service account)"
        )
    return _settings(given)


def _one_line_errors(command: _F) -> _F:
    """Expected failures are one line and exit 1; a traceback is for bugs only."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (ConfigError, KeyRefused) as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}")

    return wrapper  # type: ignore[return-value]


class _OneLineGroup(click.Group):
    """Usage mistakes too are one line and exit 1, like every other failure here."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            fail(exc.format_message())


@click.group(cls=_OneLineGroup)
def sprite() -> None:
    """Zodex Sprite: this machine as a model's remote Linux workspace, its commands run as a
    dedicated agent account that cannot touch the service."""


@sprite.command()
@_config_option
@click.option("--agent-user", help="The account commands run as (default zodex-agent).")
@click.option(
    "--agent-home", type=click.Path(path_type=Path), help="Its home when made now (default /home/<name>)."
)
@click.option("--service-user", help="The account the service runs as (default zodex).")
@click.option("--group", help="The group that may read the config (default zodex).")
@click.option("--workspace", help="The agent's workspace (default /workspace).")
@click.option("--state-dir", help="The key, status and logs (default /var/lib/zodex).")
@click.option("--runtime-dir", help="Sockets and the worker registry (default /run/zodex).")
@click.option("--install-dir", help="The code the agent runs (default /opt/zodex).")
@click.option("--port", help="TCP port (default 8080).")
@click.option("--address", help="IP address to listen on (default 0.0.0.0).")
@click.option("--tls-cert", help="TLS certificate (PEM), with --tls-key.")
@click.option("--tls-key", help="TLS private key (PEM), with --tls-cert.")
@click.option("--public-url", help="The URL clients reach the service at.")
@click.option("--allowed-hosts", help="Comma-separated host[:port] accepted in the Host header.")
@_one_line_errors
def setup(config_path: Path | None, agent_home: Path | None, **flags: str | None) -> None:
    """Make or repair this host's Sprite: accounts, group, workspace, config, state, key,
    the agent's worker code and the systemd unit. Safe to run again: keeps the key and the
    accounts, repairs owners and modes. Prints the connector URL."""
    from zodex_gateway.sprite.setup import SetupRequest
    from zodex_gateway.sprite.setup import setup as run_setup

    changes: dict[str, object] = {
        name.replace("_", "-"): value for name, value in flags.items() if value is not None
    }
    port = flags.get("port")
    if port is not None and port.isascii() and port.isdigit() and len(port) < 7:
        changes["port"] = int(port)  # anything else reaches the port check as text
    if agent_home is not None and not agent_home.is_absolute():
        fail(f"--agent-home must be an absolute path, got {str(agent_home)!r}")
    request = SetupRequest(_config_path(config_path), changes, agent_home)
    result = run_setup(request, click.echo)
    click.echo(f"config: {result.settings.config_path}")
    click.echo(
        f"connector URL (keep it secret; `zodex sprite connect` shows it again): {result.connector_url}"
    )
    # The zodex that ran setup may live where the service account cannot read it (a pyenv
    # build under root's home): from here on, the installed one is the one that works.
    click.echo(
        f"from now on use {result.zodex} for zodex sprite commands (e.g. {result.zodex} sprite status): "
        "it is the Zodex the service runs"
    )


@sprite.command()
@click.option(
    "--install-dir",
    type=click.Path(path_type=Path),
    default=Path("/opt/zodex"),
    show_default=True,
    help="Where to install Zodex, for every account to run.",
)
@_one_line_errors
def install(install_dir: Path) -> None:
    """Install Zodex in --install-dir, and nothing else: no account, config, key, workspace or
    unit. For hosts of a fleet, an image, or a setup to come; safe to run again (it replaces
    the installation only once the new one works)."""
    from zodex_gateway.sprite import install as installing
    from zodex_gateway.sprite.setup import require_root

    require_root("install")
    if not install_dir.is_absolute():
        fail(f"--install-dir must be an absolute path, got {str(install_dir)!r}")
    installing.check_install_dir(install_dir)
    # Checked as nobody: an account with no access of its own can run what was installed.
    installed = installing.install_zodex(install_dir, "nobody", "nobody")
    click.echo(
        f"Zodex installed in {install_dir} with {installed.distributions} distributions it requires, "
        f"on {installed.python}; every account can run it"
    )
    click.echo(f"from now on use {installed.zodex} (e.g. {installed.zodex} host serve --config …)")


@sprite.command()
@_config_option
def serve(config_path: Path | None) -> None:
    """Run the service in the foreground (what the systemd unit runs)."""
    settings = _settings(config_path)
    from zodex_gateway.sprite import service  # loads the server: only for serve

    sys.exit(service.main(settings))


@sprite.command()
@_config_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_one_line_errors
def status(config_path: Path | None, as_json: bool) -> None:
    """Whether the service runs: pid, port, version, agent account, public URL, active
    sessions. Exit 1 when it does not run."""
    from zodex_gateway.sprite.status import sprite_status

    info = sprite_status(_settings(config_path))
    if as_json:
        click.echo(info.to_json())
        sys.exit(0 if info.running else 1)
    if not info.running:
        fail(f"Zodex Sprite is not running: {info.reason}")
    sessions = "unknown (run as root to count)" if info.active_sessions is None else info.active_sessions
    click.echo(f"Zodex Sprite is running (pid {info.pid}, version {info.version or '?'}).")
    click.echo(f"  started:         {info.started_at or '?'}")
    click.echo(f"  port:            {info.port}")
    click.echo(f"  agent account:   {info.agent_user}")
    click.echo(f"  public URL:      {info.public_url}")
    click.echo(f"  active sessions: {sessions}")
    click.echo(f"  github:          {github_line(info.github)}")


def github_line(github: dict[str, Any] | None) -> str:
    """GitHub's mode and its publisher in one line (docs/github.md#yolo-default-status)."""
    if github is None:
        return "not set up (zodex sprite github setup)"
    socket = "present" if github["publisher_socket"] else "absent: the publisher is not running"
    grants = github["push_grants"]
    return f"{github['mode']} mode, publisher socket {socket}, {grants} live push grant{'s' if grants != 1 else ''}"


@sprite.command()
@_config_option
@_one_line_errors
def health(config_path: Path | None) -> None:
    """Check GET /health and a real MCP tools/list with the key (exactly the three tools)."""
    from zodex_gateway.sprite.health import HealthError, check_health

    settings = _root_settings("health", config_path)
    try:
        found = check_health(settings, read_key(settings.key_file))
    except HealthError as exc:
        fail(str(exc))
    click.echo(f"healthy: version {found.version}, tools {', '.join(found.tools)} at {settings.local_url()}")
    from zodex_gateway.sprite.github.operator import github_summary

    github = github_summary(settings.config_path)
    click.echo(f"github: {github_line(github)}")
    if github is not None and not github["publisher_socket"]:
        fail("GitHub is set up but its publisher is not running: clone, fetch and push fail until it is")


@sprite.command()
@_config_option
@_one_line_errors
def connect(config_path: Path | None) -> None:
    """Print the connector URL again (root only)."""
    settings = _root_settings("connect", config_path)
    click.echo(settings.connector_url(read_key(settings.key_file)))


@sprite.command("rotate-key")
@_config_option
@_one_line_errors
def rotate_key(config_path: Path | None) -> None:
    """Replace the key; the running service accepts only the new one within 5 s, and
    running sessions keep running. Prints the new connector URL."""
    settings = _root_settings("rotate-key", config_path)
    service = lookup_user(settings.service_user)
    if service is None:
        fail(f"no service account {settings.service_user}; run zodex sprite setup first")
    if not settings.state_dir.is_dir():
        fail(f"no state directory {settings.state_dir}; run zodex sprite setup first")
    key = new_key()
    write_key(settings.key_file, key, service.uid, service.gid)
    click.echo(f"new key written to {settings.key_file}; the old connector URL stops working within 5 s")
    click.echo(settings.connector_url(key))


@sprite.command()
@_config_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing lines as they are written (Ctrl-C stops).")
@click.option(
    "--lines",
    "-n",
    default=50,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many of the last lines.",
)
@_one_line_errors
def logs(config_path: Path | None, follow: bool, lines: int) -> None:
    """Print the end of the service's log; with --follow, then every new line. Control
    characters are printed escaped, never raw (docs/security.md#logs)."""
    from zodex_system import log_follow

    settings = _settings(config_path)
    if not settings.log_file.parent.is_dir():
        fail(f"no log directory {settings.log_file.parent}; run zodex sprite setup first")
    try:
        if follow:
            log_follow.follow(settings.log_file, lines, log_follow.echo_safely)
        else:
            for line in log_follow.tail(settings.log_file, lines):
                log_follow.echo_safely(line)
    except log_follow.FollowError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        pass


# Last: it imports the helpers above.
from zodex_gateway.cli.sprite_github import github as _github  # noqa: E402

sprite.add_command(_github)
