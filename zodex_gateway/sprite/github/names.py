"""Everything that names a GitHub thing and arrives from the agent, checked before use
(docs/github.md#what-the-publisher-accepts): repositories, refs, remote URLs, titles."""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "BODY_LIMIT",
    "TITLE_LIMIT",
    "InputError",
    "check_object_id",
    "check_pr_text",
    "check_ref",
    "check_repo",
    "repo_from_remote",
    "sanitize_branch_prefix",
]

TITLE_LIMIT: Final = 240
BODY_LIMIT: Final = 16_000
# GitHub's own rules: an owner is 1–39 letters, digits and single hyphens; a repository
# name 1–100 of letters, digits, ".", "-" and "_", never "." or "..".
_OWNER: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,100}")
_REF_FORBIDDEN: Final = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_OBJECT_ID: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
GITHUB_HOSTS: Final = ("github.com", "www.github.com")


class InputError(ValueError):
    """Bad input from the agent; the message is the one line it sees."""


def check_repo(raw: str) -> str:
    """``owner/repo`` exactly (no ``.git``, no slashes around)."""
    owner, slash, name = raw.partition("/")
    if (
        not slash
        or not _OWNER.fullmatch(owner)
        or "--" in owner
        or not _NAME.fullmatch(name)
        or name in (".", "..")
        or name.endswith(".git")
    ):
        raise InputError(f"repo must be in owner/repo form: {raw[:200]!r}")
    return raw


def check_ref(raw: str) -> str:
    """A full ``refs/…`` name that git itself would accept (git check-ref-format), and
    never ``..``, ``\\`` or a trailing ``/``."""
    if not raw.startswith("refs/") or len(raw) > 1024:
        raise InputError(f"ref must be a full refs/ name: {raw[:200]!r}")
    parts = raw.split("/")
    if (
        ".." in raw
        or raw.endswith(("/", ".", ".lock"))
        or "@{" in raw
        or "//" in raw
        or _REF_FORBIDDEN.search(raw)
        or any(part.startswith(".") or part.endswith(".lock") or not part for part in parts)
        or len(parts) < 3
    ):
        raise InputError(f"ref is invalid: {raw[:200]!r}")
    return raw


def check_pr_text(title: str, body: str) -> None:
    if not title.strip():
        raise InputError("PR title cannot be empty")
    if len(title) > TITLE_LIMIT:
        raise InputError(f"PR title exceeds limit ({len(title)} > {TITLE_LIMIT})")
    if len(body) > BODY_LIMIT:
        raise InputError(f"PR body exceeds limit ({len(body)} > {BODY_LIMIT})")


def check_object_id(raw: str) -> str:
    if not _OBJECT_ID.fullmatch(raw):
        raise InputError("object id is invalid")
    return raw


def _repo_from_path(path: str) -> str | None:
    trimmed = path.strip("/").removesuffix(".git")
    try:
        return check_repo(trimmed)
    except InputError:
        return None


def _host_of(authority: str) -> str:
    host = authority.rpartition("@")[2]
    if host.startswith("["):
        return host
    return host.partition(":")[0].rstrip(".").lower()


def repo_from_remote(url: str) -> str | None:
    """``owner/repo`` of a github.com remote URL — https, ssh (``ssh://git@github.com/o/r``),
    scp-style (``git@github.com:o/r.git``), or the ``zodex::`` form the agent's git
    rewrites them to — or None."""
    url = url.strip().removeprefix("zodex::")
    if "://" in url:
        scheme, _, rest = url.partition("://")
        if scheme not in ("https", "ssh", "git+ssh", "ssh+git"):
            return None
        authority, _, path = rest.partition("/")
        if scheme == "https" and "@" in authority:
            return None  # credentials in the URL: not a URL the agent's git should hold
        return _repo_from_path(path) if _host_of(authority) in GITHUB_HOSTS else None
    authority, colon, path = url.partition(":")
    if colon and "@" in authority and "/" not in authority:
        return _repo_from_path(path) if _host_of(authority) in GITHUB_HOSTS else None
    return None


def sanitize_branch_prefix(prefix: str) -> str:
    """The publish-pr branch prefix reduced to ``[A-Za-z0-9-_/]``, no empty parts."""
    kept = "".join(ch for ch in prefix if ch.isascii() and (ch.isalnum() or ch in "-_/"))
    parts = [part for part in kept.split("/") if part]
    return "/".join(parts) or "agent"
