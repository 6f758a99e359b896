"""The ``[github]`` table of the Sprite's config file (docs/github.md#config): what
``zodex sprite github setup`` records and every ``zodex sprite github`` command reads.

The Sprite's own parser (``sprite/settings.py``) leaves this table to this module; keys
are kebab-case, unknown keys are refused, every value is checked here.
"""

from __future__ import annotations

import difflib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

from zodex_gateway.config.units import ConfigError

from .names import check_ref
from .state import DEFAULT_MAX_PUSH_BYTES

__all__ = ["GITHUB_KEYS", "GitHubConfig", "check_github_value", "parse_github"]

# name → (kind, default, description)
GITHUB_KEYS: Final[dict[str, tuple[str, object, str]]] = {
    "reader-app-id": ("id", None, "the reader App's id (Contents: read)"),
    "reader-installation-id": ("id", None, "the reader App's installation"),
    "publisher-app-id": ("id", None, "the writer App's id (Contents, Pull requests, Workflows: write)"),
    "publisher-client-id": ("client-id", None, "the writer App's client id (Device Flow)"),
    "default-base": ("branch", "main", "the base branch of publish-pr when --base is not given"),
    "branch-prefix": ("branch", "agent", "the prefix of publish-pr branches"),
    "api-url": ("url", "https://api.github.com", "GitHub's REST API"),
    "web-url": ("url", "https://github.com", "GitHub's web host: git and the Device Flow"),
    "ca-file": ("path", None, "a CA bundle (PEM) for api-url and web-url; unset: the system's"),
    "publisher-user": ("account", "zodex-publisher", "the account the publisher runs as"),
    "publisher-dir": ("path", "/var/lib/zodex-publisher", "the publisher's 0700 directory: keys, grants, YOLO state, mirrors"),
    "socket": ("path", "/run/zodex-publisher/socket", "the Unix socket the agent's git reaches the publisher on"),
    "bin-dir": ("path", "/usr/local/bin", "where zodex-agent and git-remote-zodex go (on the agent's PATH)"),
    "max-push-bytes": ("size", DEFAULT_MAX_PUSH_BYTES, "the largest push the publisher accepts"),
}  # fmt: skip


@dataclass(frozen=True)
class GitHubConfig:
    reader_app_id: int
    reader_installation_id: int
    publisher_app_id: int
    publisher_client_id: str
    default_base: str
    branch_prefix: str
    api_url: str
    web_url: str
    ca_file: Path | None
    publisher_user: str
    publisher_dir: Path
    socket: Path
    bin_dir: Path
    max_push_bytes: int


def check_github_value(leaf: str, raw: object) -> object:
    name = f"github.{leaf}"
    if leaf not in GITHUB_KEYS:
        close = difflib.get_close_matches(leaf, list(GITHUB_KEYS), n=2, cutoff=0.6)
        hint = (
            f"did you mean {', '.join('github.' + c for c in close)}?"
            if close
            else "docs/github.md#config lists every key"
        )
        raise ConfigError(f"unknown key {name!r}; {hint}")
    kind = GITHUB_KEYS[leaf][0]
    if kind in ("id", "size"):
        text = str(raw).strip() if isinstance(raw, int | str) and not isinstance(raw, bool) else ""
        if not text.isdigit() or int(text) <= 0 or len(text) > 18:
            raise ConfigError(f"{name} must be a positive integer, got {raw!r}")
        return int(text)
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(f"{name}: expected a non-empty string, got {raw!r}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in raw):
        raise ConfigError(f"{name} must be a single line without control characters")
    if kind == "client-id":
        if not raw.replace(".", "").replace("_", "").replace("-", "").isalnum() or len(raw) > 100:
            raise ConfigError(f"{name} must be a GitHub App client id such as Iv1.0123abcd, got {raw!r}")
        return raw
    if kind == "branch":
        try:
            check_ref(f"refs/heads/{raw}")
        except ValueError:
            raise ConfigError(f"{name} must be a branch name, got {raw!r}") from None
        return raw
    if kind == "url":
        parts = urllib.parse.urlsplit(raw)
        if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment or parts.username:
            raise ConfigError(
                f"{name} must be an https:// URL with a host and nothing after the path, got {raw!r}"
            )
        return raw.rstrip("/")
    if kind == "path":
        pure = PurePosixPath(raw)
        if not raw.startswith("/") or ".." in pure.parts or str(pure) == "/":
            raise ConfigError(f"{name} must be an absolute path without '..', got {raw!r}")
        return str(pure)
    if kind == "account":
        from zodex_gateway.config.kinds import check_account_name

        return check_account_name(raw, name)
    raise AssertionError(kind)


def parse_github(document: Mapping[str, Any]) -> GitHubConfig | None:
    """None when the file has no ``[github]`` table (GitHub not set up)."""
    table = document.get("github")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError("github must be a table")
    values = {leaf: check_github_value(leaf, raw) for leaf, raw in table.items()}
    missing = [
        f"github.{leaf}"
        for leaf, row in GITHUB_KEYS.items()
        if row[1] is None and leaf != "ca-file" and leaf not in values
    ]
    if missing:
        raise ConfigError(f"{', '.join(missing)} missing: run `zodex sprite github setup`")

    def value(leaf: str) -> Any:
        return values.get(leaf, GITHUB_KEYS[leaf][1])

    return GitHubConfig(
        reader_app_id=value("reader-app-id"),
        reader_installation_id=value("reader-installation-id"),
        publisher_app_id=value("publisher-app-id"),
        publisher_client_id=value("publisher-client-id"),
        default_base=value("default-base"),
        branch_prefix=value("branch-prefix"),
        api_url=value("api-url"),
        web_url=value("web-url"),
        ca_file=None if value("ca-file") is None else Path(value("ca-file")),
        publisher_user=value("publisher-user"),
        publisher_dir=Path(value("publisher-dir")),
        socket=Path(value("socket")),
        bin_dir=Path(value("bin-dir")),
        max_push_bytes=value("max-push-bytes"),
    )
