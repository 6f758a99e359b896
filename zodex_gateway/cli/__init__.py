"""The ``zodex`` command (:mod:`.root`): a group per mode, in a module each."""

from zodex_gateway.cli.root import cli, main

__all__ = ["cli", "main"]
