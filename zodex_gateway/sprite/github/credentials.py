"""Tokens, minted and kept in the publisher's memory only (docs/github.md#tokens): the
reader App's installation token for fetches, the writer App's installation token scoped to
one repository for publish-pr and YOLO pushes. Each is reused until five minutes before it
expires."""

from __future__ import annotations

import threading

from .api import GitHubApi, InstallationToken
from .state import PublisherDir, PublisherSettings

__all__ = ["Credentials"]

READ: dict[str, str] = {"contents": "read", "metadata": "read"}


class Credentials:
    def __init__(self, directory: PublisherDir, settings: PublisherSettings, api: GitHubApi) -> None:
        self._dir = directory
        self._settings = settings
        self._api = api
        self._lock = threading.Lock()
        self._reader: InstallationToken | None = None
        self._writers: dict[str, InstallationToken] = {}

    def reader(self) -> str:
        with self._lock:
            if self._reader is None or not self._reader.fresh():
                self._reader = self._api.installation_token(
                    self._settings.reader_app_id,
                    self._dir.reader_key(),
                    self._settings.reader_installation_id,
                    READ,
                )
            return self._reader.value

    def writer(self, repo: str) -> str:
        """Every permission the writer App's installation has, for ``repo`` alone."""
        with self._lock:
            token = self._writers.get(repo)
            if token is None or not token.fresh():
                key = self._dir.publisher_key()
                app_id = self._settings.publisher_app_id
                installation = self._api.repo_installation(app_id, key, repo)
                token = self._api.installation_token(app_id, key, installation, {}, repo=repo)
                self._writers[repo] = token
            return token.value
