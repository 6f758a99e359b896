"""The publisher's push grants (docs/github.md#request-push-list-grants-revoke-push): Device
Flow requests waiting for a person, the grants they become, their revocation and the sweep
of expired ones."""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

from .api import GitHubApi, GitHubError
from .credentials import Credentials
from .device import DeviceCode, poll_for_token, start
from .grants import grant_records
from .names import check_repo
from .revocation import revoke, sweep_expired
from .serving import Refusal, log, text_field
from .state import MAX_TTL_SECONDS, Grant, PublisherDir, PublisherSettings, StateError

__all__ = ["GrantDesk"]

# How often expired grants are looked for, besides every list-grants.
SWEEP_INTERVAL: Final = 60.0


@dataclass
class Pending:
    """A push grant asked for and not yet approved, denied or expired."""

    uid: int
    code: DeviceCode
    ttl: int | None
    state: str = "pending"  # pending, approved, denied, expired, failed
    error: str = ""


class GrantDesk:
    def __init__(
        self, directory: PublisherDir, settings: PublisherSettings, api: GitHubApi, credentials: Credentials
    ) -> None:
        self.dir = directory
        self.settings = settings
        self.api = api
        self.credentials = credentials
        self.lock = threading.Lock()
        self.pending: dict[str, Pending] = {}

    def request_push(self, conn: socket.socket, uid: int, request: dict[str, Any]) -> dict[str, Any]:
        repo = check_repo(text_field(request, "repo"))
        ttl = request.get("ttl_seconds")
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 < ttl <= MAX_TTL_SECONDS
        ):
            raise Refusal(
                f"ttl_seconds must be a whole number of seconds from 1 to {MAX_TTL_SECONDS}, or null"
            )
        try:
            self.credentials.writer(repo)
        except GitHubError as exc:
            raise Refusal(f"repo is not covered by the writer App's installation: {repo} ({exc})") from None
        with self.lock:
            waiting = self.pending.get(repo)
            if waiting is not None and waiting.state == "pending" and waiting.code.expires_at > time.time():
                code = waiting.code  # one person, one code: the same request again shows it again
            else:
                code = start(self.api, self.settings.publisher_client_id)
                self.pending[repo] = waiting = Pending(uid, code, ttl)
                threading.Thread(target=self._await_grant, args=(repo, waiting), daemon=True).start()
        log(f"uid {uid}: request-push {repo}: device code issued")
        return {"repo": repo, "verification_uri": code.verification_uri, "user_code": code.user_code,
                "expires_at": code.expires_at, "ttl_seconds": waiting.ttl}  # fmt: skip

    def _await_grant(self, repo: str, waiting: Pending) -> None:
        try:
            token = poll_for_token(self.api, self.settings.publisher_client_id, waiting.code)
        except GitHubError as exc:
            waiting.state = (
                "expired" if "expired" in str(exc) else "denied" if "cancelled" in str(exc) else "failed"
            )
            waiting.error = str(exc)
            log(f"request-push {repo}: {exc}")
            return
        if self.pending.get(repo) is not waiting:
            return  # revoked while a person was approving it
        now = time.time()
        grant = Grant(repo, token, now, None if waiting.ttl is None else now + waiting.ttl, "agent")
        self.dir.write_grant(grant, (os.getuid(), os.getgid()))
        waiting.state = "approved"
        log(f"request-push {repo}: approved; push grant until {grant.expires_at or 'revoked'}")

    def list_grants(self, conn: socket.socket, uid: int, request: dict[str, Any]) -> dict[str, Any]:
        self.sweep()
        grants = grant_records(self.dir.grants(), time.time())
        with self.lock:
            requests = [
                {"repo": repo, "state": p.state, "user_code": p.code.user_code, "error": p.error}
                for repo, p in sorted(self.pending.items())
                if p.state != "approved"
            ]
        return {"grants": grants, "requests": requests}

    def revoke_push(self, conn: socket.socket, uid: int, request: dict[str, Any]) -> dict[str, Any]:
        repo = check_repo(text_field(request, "repo"))
        with self.lock:
            asked = self.pending.pop(repo, None)
        removed = self.dir.remove_grant(repo)
        at_github = "no token"
        if removed is not None:
            at_github = revoke(self.api, self.dir, self.settings.publisher_client_id, removed.token)
        log(f"uid {uid}: revoke-push {repo}: {'revoked' if removed else 'no grant'}; at GitHub: {at_github}")
        return {
            "repo": repo,
            "revoked": removed is not None or asked is not None,
            "github_revocation": at_github,
        }

    def sweep(self) -> None:
        """Expired grants lose their tokens (revoked at GitHub where it allows)."""
        with self.lock:
            for line in sweep_expired(self.api, self.dir, self.settings.publisher_client_id, time.time(),
                                      (os.getuid(), os.getgid())):  # fmt: skip
                log(line)

    def sweep_forever(self, stop: threading.Event) -> None:
        while not stop.wait(SWEEP_INTERVAL):
            try:
                self.sweep()
            except (StateError, OSError) as exc:
                log(f"sweeping expired grants failed: {exc}")
