"""What setup puts in place for GitHub (docs/github.md#setup): the publisher's directory,
the agent's commands (``zodex-agent``, ``git-remote-zodex``) and the agent's git config
that sends every github.com URL through ``git-remote-zodex``."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, Final

from .state import CA_FILE, PUBLISHER_KEY, READER_KEY, SETTINGS, PublisherDir

__all__ = [
    "AGENT_COMMANDS",
    "INSTEAD_OF",
    "configure_agent_git",
    "publisher_argv",
    "write_agent_commands",
    "write_publisher_dir",
]

AGENT_COMMANDS: Final = {
    "zodex-agent": "zodex_gateway.sprite.github.agent_cli",
    "git-remote-zodex": "zodex_gateway.sprite.github.remote_helper",
}
# Every spelling of a github.com remote the agent may use, rewritten to the helper.
INSTEAD_OF: Final = ("https://github.com/", "git@github.com:", "ssh://git@github.com/")
HELPER_BASE: Final = "zodex::https://github.com/"


def command_script(python: Path, module: str) -> str:
    return (
        "#!/bin/sh\n"
        "# Zodex's GitHub commands for the agent; `zodex sprite github setup` rewrites it.\n"
        f'exec {shlex.quote(str(python))} -I -m {module} "$@"\n'
    )


def write_agent_commands(bin_dir: Path, python: Path) -> list[Path]:
    """Root-owned ``0755`` scripts in ``bin_dir`` (a directory on the agent's PATH)."""
    written = []
    for name, module in AGENT_COMMANDS.items():
        path = bin_dir / name
        temporary = path.with_name(f".{name}.new")
        temporary.write_text(command_script(python, module))
        temporary.chmod(0o755)
        os.replace(temporary, path)
        written.append(path)
    return written


def configure_agent_git(home: Path, uid: int, gid: int, socket: Path) -> None:
    """``url."zodex::https://github.com/".insteadOf`` for fetch and push (``insteadOf``
    covers both) and ``zodex.socket``, in the agent's own ``~/.gitconfig``; other settings
    there are kept. git runs as the agent: the file is the agent's to point anywhere (a
    symlink to a file of root's), so root never writes it."""

    def git_config(*args: str, check: bool = True) -> None:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
        done = subprocess.run(
            ["git", "config", "--global", *args], env=env, cwd="/", user=uid, group=gid, extra_groups=[],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise OSError(f"git config of the agent's {home}/.gitconfig failed: {done.stderr.strip()}")

    key = f"url.{HELPER_BASE}.insteadOf"
    git_config("--unset-all", key, check=False)  # absent the first time
    for prefix in INSTEAD_OF:
        git_config("--add", key, prefix)
    git_config("zodex.socket", str(socket))


def write_publisher_dir(
    directory: Path,
    owner: tuple[int, int],
    settings: dict[str, Any],
    reader_key: bytes,
    publisher_key: bytes,
    ca: bytes | None,
) -> None:
    """The publisher's ``0700`` directory and its ``0600`` files, owned by the publisher."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(directory, *owner)
    directory.chmod(0o700)
    target = PublisherDir(directory)
    target.write_file(READER_KEY, reader_key, owner)
    target.write_file(PUBLISHER_KEY, publisher_key, owner)
    if ca is not None:
        target.write_file(CA_FILE, ca, owner)
    else:
        (directory / CA_FILE).unlink(missing_ok=True)
    target.write_file(SETTINGS, json.dumps(settings, indent=1).encode(), owner)


def publisher_argv(python: Path, directory: Path, socket: Path) -> list[str]:
    return [
        str(python),
        "-I",
        "-m",
        "zodex_gateway.sprite.github.publisher",
        "--dir",
        str(directory),
        "--socket",
        str(socket),
    ]
