"""git between the publisher and GitHub (docs/github.md#the-relay): one bare mirror per
repository in the publisher's directory, refreshed from GitHub before every agent fetch or
push, and the token handed to git in a ``0600`` config file named by ``GIT_CONFIG_GLOBAL``
— never in an environment value, a command line or a URL, where ``/proc`` would show it."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

__all__ = ["RelayError", "authenticated", "git_env", "mirror_lock", "mirror_path", "refresh"]

GIT: Final = "/usr/bin/git"
FETCH_TIMEOUT: Final = 600


class RelayError(Exception):
    """git against GitHub failed; the message is git's own last lines."""


def git_env(home: Path, config: Path | None = None) -> dict[str, str]:
    """A clean environment: nothing of the publisher's (a ``GIT_SSL_CAINFO`` or a proxy)
    reaches git."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_GLOBAL": str(config) if config else "/dev/null",
    }
    return env


@contextlib.contextmanager
def authenticated(scratch: Path, web_url: str, token: str, ca_file: Path | None) -> Iterator[Path]:
    """A git config file sending ``Basic x-access-token:<token>`` to ``web_url`` only."""
    scratch.mkdir(mode=0o700, exist_ok=True)
    path = scratch / f"auth-{secrets.token_hex(8)}.gitconfig"
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    lines = [f'[http "{web_url.rstrip("/")}/"]', f"\textraHeader = Authorization: Basic {basic}"]
    if ca_file is not None:
        lines.append(f"\tsslCAInfo = {ca_file}")
    lines += ["[credential]", "\thelper ="]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
    finally:
        os.close(fd)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def mirror_path(mirrors: Path, repo: str) -> Path:
    return mirrors / f"{repo}.git"


@contextlib.contextmanager
def mirror_lock(mirrors: Path, repo: str) -> Iterator[Path]:
    """The mirror of ``repo``, made if new, held by this process until the block ends: one
    fetch or push through a mirror at a time."""
    mirror = mirror_path(mirrors, repo)
    mirror.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = mirror.parent / f".{mirror.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not (mirror / "HEAD").exists():
            run_git(["init", "--bare", "-q", str(mirror)], mirrors.parent)
        yield mirror
    finally:
        os.close(fd)


def run_git(args: list[str], home: Path, config: Path | None = None, timeout: float = FETCH_TIMEOUT) -> str:
    try:
        done = subprocess.run(
            [GIT, *args],
            env=git_env(home, config),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RelayError(f"git {args[0]} timed out after {timeout:.0f}s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()][-3:]
        raise RelayError("; ".join(lines) or f"git {args[0]} failed ({done.returncode})")
    return done.stdout


def refresh(mirror: Path, home: Path, config: Path, url: str, default_branch: str) -> None:
    """The mirror's branches and tags made GitHub's, deleted ones pruned, HEAD GitHub's."""
    run_git(
        ["--git-dir", str(mirror), "fetch", "--quiet", "--prune", "--no-tags", "--no-write-fetch-head",
         url, "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
        home, config,
    )  # fmt: skip
    run_git(["--git-dir", str(mirror), "symbolic-ref", "HEAD", f"refs/heads/{default_branch}"], home)
