"""``zodex-agent``: the agent's side of Sprite and GitHub (docs/github.md#the-agents-commands).
It talks to the publisher over its socket and pushes through ``git-remote-zodex``; it never
sees a token."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from .checkout import CheckoutError, check_checkout
from .client import PublisherUnavailable, request
from .names import BODY_LIMIT, TITLE_LIMIT, InputError, check_repo

__all__ = ["main"]


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


@click.group()
def cli() -> None:
    """Zodex's commands for the agent account of a Sprite."""


@cli.group()
def github() -> None:
    """GitHub through the Zodex publisher: publish a PR, ask for push."""


@github.command("publish-pr")
@click.option("--repo", required=True, help="owner/repo; the checkout's origin must be it")
@click.option("--title", required=True, help=f"the PR's title (at most {TITLE_LIMIT} characters)")
@click.option("--base", default="", help="the branch to merge into (default: github.default-base)")
@click.option("--body", default="", help=f"the PR's description (at most {BODY_LIMIT} characters)")
@click.option("--draft", is_flag=True, help="open it as a draft")
def publish_pr(repo: str, title: str, base: str, body: str, draft: bool) -> None:
    """Push HEAD to a new agent/… branch and open a pull request from it."""
    try:
        check_repo(repo)
        if not title.strip():
            raise InputError("PR title cannot be empty")
        if len(title) > TITLE_LIMIT:
            raise InputError(f"PR title exceeds limit ({len(title)} > {TITLE_LIMIT})")
        if len(body) > BODY_LIMIT:
            raise InputError(f"PR body exceeds limit ({len(body)} > {BODY_LIMIT})")
        root = check_checkout(Path.cwd(), repo)
        planned = request(
            {"op": "publish-pr", "repo": repo, "title": title, "body": body, "base": base, "draft": draft}
        )
    except (InputError, CheckoutError, PublisherUnavailable) as exc:
        _fail(str(exc))
        return
    branch = str(planned["branch"])
    pushed = subprocess.run(
        ["git", "push", "--quiet", f"zodex::https://github.com/{repo}", f"HEAD:refs/heads/{branch}"],
        cwd=root,
        env={**os.environ, "ZODEX_PUBLISH_TICKET": str(planned["ticket"])},
        check=False,
    )
    if pushed.returncode != 0:
        _fail(f"the push of HEAD to {branch} failed (git's message above)")
    try:
        made = request({"op": "open-pr", "ticket": planned["ticket"]})
    except PublisherUnavailable as exc:
        _fail(f"{branch} was pushed but the pull request was not opened: {exc}")
        return
    click.echo("publish-pr: created")
    for name in ("repo", "url", "number", "branch", "base"):
        click.echo(f"{name}: {made[name]}")
    click.echo(f"draft: {'true' if made['draft'] else 'false'}")


def main() -> None:
    cli(prog_name="zodex-agent")


if __name__ == "__main__":
    main()
