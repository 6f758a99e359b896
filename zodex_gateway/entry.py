"""The ``zodex`` command. ``zodex local connect`` is started by MCP clients, which give up
on a server that is slow to answer: it goes straight to the bridge, without loading the CLI
(click and every command's modules). Everything else is the CLI."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["local", "connect"]:
        from zodex_gateway.local.bridge.stdio import run_bridge
        from zodex_gateway.local.paths import LocalPaths

        sys.exit(run_bridge(LocalPaths.from_env()))
    from zodex_gateway.cli import main as cli_main

    cli_main()
