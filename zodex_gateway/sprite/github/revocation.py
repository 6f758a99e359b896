"""Ending push grants (docs/github.md#request-push-list-grants-revoke-push): a revoked
grant's file is removed, an expired one keeps its record without the token, and the user
token is revoked at GitHub when the writer App's client secret is configured."""

from __future__ import annotations

import dataclasses

from .api import GitHubApi, GitHubError
from .state import Grant, PublisherDir

__all__ = ["revoke", "sweep_expired"]


def revoke(api: GitHubApi, directory: PublisherDir, client_id: str, token: str) -> str:
    """``done``, ``not-configured`` (no client secret) or ``failed: <why>``."""
    if not token:
        return "done"  # dropped after it expired: revoked then, or never revocable
    secret = directory.client_secret()
    if secret is None:
        return "not-configured"
    try:
        api.revoke_user_token(client_id, secret, token)
    except GitHubError as exc:
        return f"failed: {exc}"
    return "done"


def sweep_expired(
    api: GitHubApi, directory: PublisherDir, client_id: str, now: float, owner: tuple[int, int]
) -> list[str]:
    """Every expired grant still holding a token: revoked at GitHub where possible, its token
    dropped from the file. Returns one line per grant for the log."""
    lines = []
    for grant in directory.grants():
        if grant.live(now) or not grant.token:
            continue
        outcome = revoke(api, directory, client_id, grant.token)
        kept: Grant = dataclasses.replace(grant, token="", revoked_at_github=outcome == "done")
        directory.write_grant(kept, owner)
        lines.append(f"push grant for {grant.repo} expired; revocation at GitHub: {outcome}")
    return lines
