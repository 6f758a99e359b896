"""GitHub's Device Flow for a push grant (docs/github.md#request-push-list-grants-revoke-push): a code a person
enters at ``verification_uri``, then polling at GitHub's interval until they approve, deny,
or the code expires. The token that comes back goes to the publisher's directory only."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .api import GitHubApi, GitHubError

__all__ = ["DeviceCode", "poll_for_token", "start"]


@dataclass(frozen=True)
class DeviceCode:
    device_code: str
    user_code: str
    verification_uri: str
    expires_at: float
    interval: float


def start(api: GitHubApi, client_id: str) -> DeviceCode:
    found = api.device_code(client_id)
    try:
        return DeviceCode(
            str(found["device_code"]),
            str(found["user_code"]),
            str(found["verification_uri"]),
            time.time() + float(found["expires_in"]),
            max(float(found.get("interval", 5)), 1.0),
        )
    except (KeyError, TypeError, ValueError):
        raise GitHubError(
            "GitHub's device code answer lacks device_code, user_code or verification_uri"
        ) from None


def poll_for_token(
    api: GitHubApi, client_id: str, code: DeviceCode, sleep: Callable[[float], None] = time.sleep
) -> str:
    """The user token once the person approves; GitHubError with the reference's messages
    when they deny or the code expires."""
    interval = code.interval
    while True:
        if time.time() >= code.expires_at:
            raise GitHubError("GitHub device flow code expired before authorization completed")
        sleep(interval)
        found = api.poll_device(client_id, code.device_code)
        token = found.get("access_token")
        if isinstance(token, str) and token:
            return token
        error = found.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += 5  # RFC 8628: every slow_down adds five seconds
            continue
        if error == "expired_token":
            raise GitHubError("GitHub device flow code expired before authorization completed")
        if error == "access_denied":
            raise GitHubError("GitHub device flow authorization was cancelled")
        if error == "device_flow_disabled":
            raise GitHubError("GitHub App device flow is disabled; enable device flow in the app settings")
        raise GitHubError(f"GitHub device flow failed with {str(error)[:80]}")
