"""``zodex``: the operator CLI, one group per mode (:mod:`.local`, :mod:`.sprite`,
:mod:`.fleet`), each a thin click layer over typed functions."""

from __future__ import annotations

import click

from zodex_gateway.cli.fleet import gateway, host
from zodex_gateway.cli.local import fail, local
from zodex_gateway.cli.sprite import sprite
from zodex_system.private_dirs import UnsafeDirectory


@click.group()
@click.version_option(package_name="zodex")
def cli() -> None:
    """Zodex operator CLI: run Zodex Local on this machine and connect MCP clients to it."""


cli.add_command(local)
cli.add_command(sprite)
cli.add_command(host)
cli.add_command(gateway)


def main() -> None:
    try:
        cli()
    except UnsafeDirectory as exc:
        # Any command that reads or writes Local's state: one line, nothing changed.
        fail(str(exc))
