"""``zodex host …`` and ``zodex gateway …`` (docs/fleet.md): a thin click layer. Each
command exits 0 on success, 1 on failure with one line on stderr."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from zodex_gateway.config.units import ConfigError
from zodex_gateway.fleet.settings import (
    DEFAULT_GATEWAY_CONFIG,
    DEFAULT_HOST_CONFIG,
    GATEWAY_CONFIG_ENV,
    HOST_CONFIG_ENV,
    default_path,
    load_gateway_settings,
    load_host_settings,
)


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _absolute(path: Path) -> Path:
    return path if path.is_absolute() else Path.cwd() / path


# Every refusal of a config path is the loader's one line, a directory's included.
_CONFIG = click.Path(readable=False, path_type=Path)


@click.group()
def host() -> None:
    """A fleet host: this machine's workspace, served to gateways over ZeroMQ."""


@host.command("serve")
@click.option(
    "--config",
    "config_path",
    type=_CONFIG,
    default=None,
    help="host.toml (default: $ZODEX_HOST_CONFIG, else /etc/zodex/host.toml).",
)
def host_serve(config_path: Path | None) -> None:
    """Serve this machine's workers to the gateways the config allows, until SIGTERM."""
    path = _absolute(config_path or default_path(HOST_CONFIG_ENV, DEFAULT_HOST_CONFIG))
    try:
        settings = load_host_settings(path)
    except ConfigError as exc:
        click.echo(f"zodex host serve: {exc}", err=True)
        sys.exit(1)
    from zodex_gateway.fleet.host_service import main

    sys.exit(main(settings))


@host.command("keygen")
@click.option(
    "--out", "out_dir", required=True, type=click.Path(path_type=Path), help="An existing directory."
)
@click.option("--name", required=True, help="The key's file name, without extension.")
@click.option(
    "--signing", is_flag=True, help="Write NAME.signing, the envelope key of a host and its gateways."
)
@click.option("--mcp", is_flag=True, help="Write NAME.mcp, the key MCP clients give for one host.")
def host_keygen(out_dir: Path, name: str, signing: bool, mcp: bool) -> None:
    """Write a CURVE key pair NAME.key (0600) and NAME.pub, or with a flag another key; never overwrites."""
    if signing and mcp:
        _fail("--signing and --mcp write different keys: give one of them")
    kind = "signing" if signing else "mcp" if mcp else "curve"
    from zodex_gateway.fleet import keys  # loads ZeroMQ, which the other commands do not need

    try:
        written = keys.keygen(_absolute(out_dir), name, kind)
    except ConfigError as exc:
        _fail(str(exc))
    for path in written:
        click.echo(str(path))


@click.group()
def gateway() -> None:
    """A fleet gateway: MCP over HTTP for every host its config names."""


@gateway.command("serve")
@click.option(
    "--config",
    "config_path",
    type=_CONFIG,
    default=None,
    help="gateway.toml (default: $ZODEX_GATEWAY_CONFIG, else /etc/zodex/gateway.toml).",
)
def gateway_serve(config_path: Path | None) -> None:
    """Serve /h/<host>/mcp for each configured host until SIGTERM."""
    path = _absolute(config_path or default_path(GATEWAY_CONFIG_ENV, DEFAULT_GATEWAY_CONFIG))
    try:
        settings = load_gateway_settings(path)
    except ConfigError as exc:
        click.echo(f"zodex gateway serve: {exc}", err=True)
        sys.exit(1)
    from zodex_gateway.fleet.gateway_service import main

    sys.exit(main(settings))
