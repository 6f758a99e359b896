"""The GitHub REST calls the publisher makes (docs/github.md#github-calls), through httpx2,
the project's one HTTP client, with App JWTs from PyJWT.

Only the publisher account runs this: it alone can read the keys. Nothing here logs or
raises a token or a key; an error carries GitHub's own ``message`` and the status.
``trust_env=False`` keeps proxies and CA bundles of the environment out: the CA is
``github.ca-file`` or the system's.
"""

from __future__ import annotations

import base64
import datetime
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx2
import jwt

from .errors import GitHubError

__all__ = ["GitHubApi", "GitHubError", "InstallationToken", "app_jwt"]

API_VERSION: Final = "2022-11-28"
DEVICE_GRANT: Final = "urn:ietf:params:oauth:grant-type:device_code"
# GitHub refuses a JWT that expires more than ten minutes after it was issued; iat is
# backdated a minute against clock drift, as GitHub recommends.
JWT_LIFETIME: Final = 540


@dataclass(frozen=True)
class InstallationToken:
    value: str
    expires_at: float
    permissions: dict[str, str]

    def fresh(self, margin: float = 300) -> bool:
        return self.expires_at - margin > time.time()


def app_jwt(app_id: int, private_key: bytes) -> str:
    now = int(time.time())
    try:
        return jwt.encode(
            {"iat": now - 60, "exp": now + JWT_LIFETIME, "iss": str(app_id)}, private_key, "RS256"
        )
    except (ValueError, TypeError, jwt.PyJWTError) as exc:
        raise GitHubError(f"the private key cannot sign an App JWT: {type(exc).__name__}") from None


def _expiry(raw: object) -> float:
    try:
        return datetime.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time() + 600  # no usable expiry: treated as short-lived


class GitHubApi:
    def __init__(self, api_url: str, web_url: str, ca_file: Path | None) -> None:
        self.api_url = api_url.rstrip("/")
        self.web_url = web_url.rstrip("/")
        self._verify = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)

    def _client(self, base: str) -> httpx2.Client:
        return httpx2.Client(
            base_url=base,
            verify=self._verify,
            trust_env=False,
            timeout=30,
            headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION},
        )

    def _call(self, what: str, method: str, path: str, auth: str, json: Any = None) -> Any:
        try:
            with self._client(self.api_url) as http:
                answer = http.request(method, path, headers={"Authorization": auth}, json=json)
        except httpx2.HTTPError as exc:
            raise GitHubError(f"GitHub {what} failed: {type(exc).__name__}: {exc}") from None
        if answer.status_code >= 300:
            raise GitHubError(f"GitHub {what} failed ({answer.status_code}): {_message(answer)}")
        return answer.json() if answer.content else None

    # --- as the App (JWT) ----------------------------------------------------------------

    def app(self, app_id: int, key: bytes) -> dict[str, Any]:
        found: dict[str, Any] = self._call("App lookup", "GET", "/app", f"Bearer {app_jwt(app_id, key)}")
        return found

    def installation(self, app_id: int, key: bytes, installation_id: int) -> dict[str, Any]:
        path = f"/app/installations/{installation_id}"
        found: dict[str, Any] = self._call(
            "installation lookup", "GET", path, f"Bearer {app_jwt(app_id, key)}"
        )
        return found

    def repo_installation(self, app_id: int, key: bytes, repo: str) -> int:
        path = f"/repos/{repo}/installation"
        found = self._call(f"installation lookup for {repo}", "GET", path, f"Bearer {app_jwt(app_id, key)}")
        return int(found["id"])

    def installation_token(
        self,
        app_id: int,
        key: bytes,
        installation_id: int,
        permissions: dict[str, str],
        repo: str | None = None,
    ) -> InstallationToken:
        body: dict[str, Any] = {"permissions": permissions} if permissions else {}
        if repo is not None:
            body["repositories"] = [repo.partition("/")[2]]
        found = self._call(
            "installation token request",
            "POST",
            f"/app/installations/{installation_id}/access_tokens",
            f"Bearer {app_jwt(app_id, key)}",
            json=body,
        )
        return InstallationToken(
            str(found["token"]), _expiry(found.get("expires_at")), dict(found["permissions"])
        )

    # --- with a token --------------------------------------------------------------------

    def repo(self, token: str, repo: str) -> dict[str, Any]:
        found: dict[str, Any] = self._call(
            f"repository lookup for {repo}", "GET", f"/repos/{repo}", f"Bearer {token}"
        )
        return found

    def create_pull(
        self, token: str, repo: str, *, head: str, base: str, title: str, body: str, draft: bool
    ) -> dict[str, Any]:
        payload = {"head": head, "base": base, "title": title, "body": body, "draft": draft}
        made: dict[str, Any] = self._call(
            "pull request creation", "POST", f"/repos/{repo}/pulls", f"Bearer {token}", json=payload
        )
        return made

    def revoke_user_token(self, client_id: str, client_secret: str, token: str) -> None:
        """GitHub revokes an App's user token only with the App's client id and secret."""
        basic = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
        self._call("user token revocation", "DELETE", f"/applications/{client_id}/token", f"Basic {basic}",
                   json={"access_token": token})  # fmt: skip

    # --- Device Flow, on the web host ----------------------------------------------------

    def _form(self, what: str, path: str, data: dict[str, str]) -> dict[str, Any]:
        try:
            with self._client(self.web_url) as http:
                answer = http.post(path, data=data, headers={"Accept": "application/json"})
        except httpx2.HTTPError as exc:
            raise GitHubError(f"GitHub {what} failed: {type(exc).__name__}: {exc}") from None
        if answer.status_code >= 300:
            raise GitHubError(f"GitHub {what} failed ({answer.status_code}): {_message(answer)}")
        found: dict[str, Any] = answer.json()
        return found

    def device_code(self, client_id: str) -> dict[str, Any]:
        found = self._form("device code request", "/login/device/code", {"client_id": client_id})
        if "error" in found:
            if found["error"] == "device_flow_disabled":
                raise GitHubError(
                    "GitHub App device flow is disabled; enable device flow in the app settings"
                )
            raise GitHubError(f"GitHub device code request failed with {found['error']}")
        return found

    def poll_device(self, client_id: str, device_code: str) -> dict[str, Any]:
        data = {"client_id": client_id, "device_code": device_code, "grant_type": DEVICE_GRANT}
        return self._form("device flow token request", "/login/oauth/access_token", data)


def _message(answer: httpx2.Response) -> str:
    try:
        found = answer.json()
        message = str(found.get("message", "")) if isinstance(found, dict) else ""
    except ValueError:
        message = ""
    return (message or answer.reason_phrase or "no message")[:300]
