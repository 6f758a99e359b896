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
from .grants import grant_lines, when
from .names import BODY_LIMIT, TITLE_LIMIT, InputError, check_pr_text, check_repo
from .state import StateError, parse_ttl

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
        check_pr_text(title, body)
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


@github.command("request-push")
@click.option("--repo", required=True, help="owner/repo")
@click.option(
    "--ttl", default="30m", show_default=True, help="How long pushes work once approved: 30m, 2h, 1d."
)
@click.option("--no-ttl", is_flag=True, help="Until revoked.")
def request_push(repo: str, ttl: str, no_ttl: bool) -> None:
    """Ask a person, through GitHub's Device Flow, to let pushes to REPO work for a while."""
    try:
        check_repo(repo)
        seconds = None if no_ttl else parse_ttl(ttl)
        asked = request({"op": "request-push", "repo": repo, "ttl_seconds": seconds})
    except (InputError, StateError, PublisherUnavailable) as exc:
        _fail(str(exc))
        return
    click.echo("request-push: pending")
    click.echo(f"repo: {asked['repo']}")
    click.echo(f"verification-uri: {asked['verification_uri']}")
    click.echo(f"user-code: {asked['user_code']}")
    click.echo(f"code-expires-at: {when(asked['expires_at'])}")
    click.echo(f"ttl: {'none' if seconds is None else ttl}")
    click.echo(
        "next: ask a person to open verification-uri and enter user-code; once they approve, git push to "
        f"{repo} works (zodex-agent github list-grants shows it)"
    )


@github.command("list-grants")
def list_grants() -> None:
    """Push grants (never their tokens) and requests still waiting for a person."""
    try:
        found = request({"op": "list-grants"})
    except PublisherUnavailable as exc:
        _fail(str(exc))
        return
    for line in grant_lines(found["grants"], found["requests"]):
        click.echo(line)


@github.command("revoke-push")
@click.option("--repo", required=True, help="owner/repo")
def revoke_push(repo: str) -> None:
    """End the push grant for REPO (and a request still waiting)."""
    try:
        check_repo(repo)
        done = request({"op": "revoke-push", "repo": repo})
    except (InputError, PublisherUnavailable) as exc:
        _fail(str(exc))
        return
    click.echo(f"revoke-push: {'revoked' if done['revoked'] else 'no grant'}")
    click.echo(f"repo: {repo}")
    click.echo(f"github-revocation: {done.get('github_revocation', 'no token')}")


def main() -> None:
    cli(prog_name="zodex-agent")


if __name__ == "__main__":
    main()
