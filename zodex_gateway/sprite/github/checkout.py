"""The agent's checkout, as publish-pr sees it (docs/github.md#publish-pr): clean, and its
``origin`` the repository named. Runs as the agent: nothing here is trusted by the
publisher, which checks again what it is sent."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .names import repo_from_remote

__all__ = ["CheckoutError", "check_checkout"]


class CheckoutError(Exception):
    pass


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CheckoutError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def check_checkout(cwd: Path, repo: str) -> Path:
    """The checkout's root; raises with the reference's messages."""
    root = Path(_git(cwd, "rev-parse", "--show-toplevel").strip())
    if _git(root, "status", "--porcelain").strip():
        raise CheckoutError("publish-pr requires a clean worktree; commit or stash changes first")
    remote = _git(root, "remote", "get-url", "origin").strip()
    found = repo_from_remote(remote)
    if found is None:
        raise CheckoutError(f"git remote origin does not point to a supported GitHub repo URL: {remote}")
    if found.lower() != repo.lower():
        raise CheckoutError(
            f"current checkout is for {found}, but publish-pr targeted {repo}; switch to the matching repo before publishing"
        )
    _git(root, "rev-parse", "--verify", "HEAD^{commit}")
    return root
