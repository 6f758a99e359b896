"""``zodex``: the operator CLI. A thin click layer over typed functions."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="zodex")
def cli() -> None:
    """Zodex operator CLI. Run an MCP client against `zodex-gateway stdio` or `zodex-gateway http`."""


def main() -> None:
    cli()
