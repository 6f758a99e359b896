"""``zodex sprite github …`` (docs/github.md#operator-commands): the operator's GitHub
commands, a thin click layer over ``zodex_gateway.sprite.github.operator``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from zodex_gateway.cli.sprite import _config_option, _config_path, _one_line_errors, fail

if TYPE_CHECKING:
    from zodex_gateway.sprite.github.config import GitHubConfig


def _ttl(ttl: str, no_ttl: bool) -> int | None:
    from zodex_gateway.sprite.github.state import StateError, parse_ttl

    if no_ttl:
        return None
    try:
        return parse_ttl(ttl)
    except StateError as exc:
        fail(str(exc))


def _github_config(config_path: Path | None) -> GitHubConfig:
    """The ``[github]`` table of the config: loaded the same way for every command."""
    from zodex_gateway.sprite.github.operator import load_github

    return load_github(_config_path(config_path))


def _echo_lines(lines: Iterable[str]) -> None:
    for line in lines:
        click.echo(line)


_repo_option = click.option("--repo", required=True, help="owner/repo")


@click.group()
def github() -> None:
    """GitHub for the agent: clone and fetch always, push per mode (publish-pr, push grants,
    YOLO), through a publisher account that alone holds the Apps' keys and tokens."""


@github.command()
@_config_option
@click.option("--reader-app-id", required=True, help="The reader App's id (Contents: read).")
@click.option("--reader-installation-id", required=True, help="The reader App's installation id.")
@click.option(
    "--reader-key", required=True, type=click.Path(path_type=Path), help="The reader App's private key (PEM)."
)
@click.option("--publisher-app-id", required=True, help="The writer App's id.")
@click.option("--publisher-client-id", required=True, help="The writer App's client id (Device Flow).")
@click.option(
    "--publisher-key",
    required=True,
    type=click.Path(path_type=Path),
    help="The writer App's private key (PEM).",
)
@click.option(
    "--publisher-client-secret-file",
    type=click.Path(path_type=Path),
    help="A file holding the writer App's client secret: lets revoked and expired grants be revoked at GitHub.",
)
@click.option("--default-base", help="publish-pr's base branch when --base is not given (default main).")
@click.option("--api-url", help="GitHub's REST API (default https://api.github.com).")
@click.option(
    "--web-url", help="GitHub's web host, for git and the Device Flow (default https://github.com)."
)
@click.option("--ca-file", help="A CA bundle (PEM) for both URLs (default: the system's).")
@click.option("--publisher-user", help="The publisher's account (default zodex-publisher).")
@click.option("--publisher-dir", help="The publisher's directory (default /var/lib/zodex-publisher).")
@click.option("--socket", help="The publisher's socket (default /run/zodex-publisher/socket).")
@click.option("--bin-dir", help="Where the agent's commands go, on its PATH (default /usr/local/bin).")
@_one_line_errors
def setup(
    config_path: Path | None,
    reader_key: Path,
    publisher_key: Path,
    publisher_client_secret_file: Path | None,
    **flags: str | None,
) -> None:
    """Check both Apps against GitHub, then give the keys to the publisher, record [github]
    in the config, install the agent's commands and git config, and write the publisher's
    unit. Safe to run again; a refused setup changes nothing."""
    from zodex_gateway.sprite.github.operator import github_setup

    changes = {name.replace("_", "-"): value for name, value in flags.items()}
    config = github_setup(
        _config_path(config_path),
        changes,
        {"reader": reader_key, "publisher": publisher_key, "client-secret": publisher_client_secret_file},
        click.echo,
    )
    click.echo(f"github: set up; the agent reaches {config.web_url} through {config.socket}")


@github.command()
@_config_option
@click.option(
    "--repo",
    "repos",
    multiple=True,
    help="owner/repo (repeat); none: every repo the writer App is installed on.",
)
@click.option("--ttl", default="2h", show_default=True, help="How long: 30m, 2h, 1d.")
@click.option("--no-ttl", is_flag=True, help="Until `zodex sprite github default`.")
@_one_line_errors
def yolo(config_path: Path | None, repos: tuple[str, ...], ttl: str, no_ttl: bool) -> None:
    """Let the agent push anything (branches, tags, deletes, force) to these repos."""
    from zodex_gateway.sprite.github.operator import set_yolo

    seconds = _ttl(ttl, no_ttl)
    _echo_lines(set_yolo(_github_config(config_path), list(repos), seconds))


@github.command()
@_config_option
@_one_line_errors
def default(config_path: Path | None) -> None:
    """Back to the default mode: clone and fetch, no direct push (grants are kept)."""
    from zodex_gateway.sprite.github.operator import set_default

    _echo_lines(set_default(_github_config(config_path)))


@github.command()
@_config_option
@_one_line_errors
def status(config_path: Path | None) -> None:
    """The mode, its repos and expiry, the publisher's socket, live push grants."""
    from zodex_gateway.sprite.github.operator import status_lines

    _echo_lines(status_lines(_github_config(config_path)))


@github.command("grant-push")
@_config_option
@_repo_option
@click.option("--ttl", default="30m", show_default=True, help="How long: 30m, 2h, 1d.")
@click.option("--no-ttl", is_flag=True, help="Until revoked.")
@_one_line_errors
def grant_push(config_path: Path | None, repo: str, ttl: str, no_ttl: bool) -> None:
    """Grant pushes to REPO: GitHub's Device Flow, approved by a person, waited for here."""
    from zodex_gateway.sprite.github.operator import grant_push as granting

    seconds = _ttl(ttl, no_ttl)
    _echo_lines(granting(_github_config(config_path), repo, seconds, click.echo))


@github.command("revoke-push")
@_config_option
@_repo_option
@_one_line_errors
def revoke_push(config_path: Path | None, repo: str) -> None:
    """End the push grant for REPO."""
    from zodex_gateway.sprite.github.operator import revoke_push as revoking

    _echo_lines(revoking(_github_config(config_path), repo))


@github.command("list-grants")
@_config_option
@_one_line_errors
def list_grants(config_path: Path | None) -> None:
    """Push grants, without their tokens."""
    from zodex_gateway.sprite.github.operator import list_grant_lines

    _echo_lines(list_grant_lines(_github_config(config_path)))
