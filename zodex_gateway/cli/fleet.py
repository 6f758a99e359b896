"""``zodex host …`` and ``zodex gateway …`` (docs/fleet.md): a thin click layer. Each
command exits 0 on success, 1 on failure with one line on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from zodex_gateway.config.schema import path_from_env
from zodex_gateway.config.units import ConfigError
from zodex_gateway.fleet.settings import (
    DEFAULT_GATEWAY_CONFIG,
    DEFAULT_HOST_CONFIG,
    GATEWAY_CONFIG_ENV,
    HOST_CONFIG_ENV,
    load_gateway_settings,
    load_host_settings,
)

_F = TypeVar("_F", bound=Callable[..., Any])
_S = TypeVar("_S")


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _absolute(path: Path) -> Path:
    return path if path.is_absolute() else Path.cwd() / path


# Every refusal of a config path is the loader's one line, a directory's included.
_CONFIG = click.Path(readable=False, path_type=Path)


@dataclass(frozen=True)
class _ConfigFile:
    """Where a ``serve`` command reads its config: ``--config``, else ``$env``, else ``default``."""

    env: str
    default: Path

    def option(self) -> Callable[[_F], _F]:
        return click.option(
            "--config",
            "config_path",
            type=_CONFIG,
            default=None,
            help=f"{self.default.name} (default: ${self.env}, else {self.default}).",
        )

    def load(self, command: str, loader: Callable[[Path], _S], given: Path | None) -> _S:
        """The settings, or the loader's refusal as ``zodex <command>``'s one line."""
        try:
            return loader(_absolute(given or path_from_env(self.env, self.default)))
        except ConfigError as exc:
            click.echo(f"zodex {command}: {exc}", err=True)
            sys.exit(1)


_HOST_CONFIG = _ConfigFile(HOST_CONFIG_ENV, DEFAULT_HOST_CONFIG)
_GATEWAY_CONFIG = _ConfigFile(GATEWAY_CONFIG_ENV, DEFAULT_GATEWAY_CONFIG)


@click.group()
def host() -> None:
    """A fleet host: this machine's workspace, served to gateways over ZeroMQ."""


@host.command("serve")
@_HOST_CONFIG.option()
def host_serve(config_path: Path | None) -> None:
    """Serve this machine's workers to the gateways the config allows, until SIGTERM."""
    settings = _HOST_CONFIG.load("host serve", load_host_settings, config_path)
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
@_GATEWAY_CONFIG.option()
def gateway_serve(config_path: Path | None) -> None:
    """Serve /h/<host>/mcp for each configured host until SIGTERM."""
    settings = _GATEWAY_CONFIG.load("gateway serve", load_gateway_settings, config_path)
    from zodex_gateway.fleet.gateway_service import main

    sys.exit(main(settings))
