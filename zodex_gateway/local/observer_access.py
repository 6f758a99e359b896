"""How a viewer on this machine reaches the running runtime's observer API.

The observer advertises itself in ``discovery.json`` (``observability``); its bearer lives
in a ``0600`` file that only this user can read, and so does the steer token when
``observer.steer`` is on. Viewers (``zodex local watch`` and its
terminal mode) read both here and never hand the bearer to a browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.config.operator_command import zodex_command
from zodex_gateway.local.lifecycle import LocalError, active
from zodex_gateway.local.paths import LocalPaths


@dataclass(frozen=True)
class ObserverAccess:
    base_url: str  # e.g. http://127.0.0.1:41234 (no trailing slash)
    bearer: str
    runtime_id: str
    # With observer.steer on: the token of the one route that types into a session. Only
    # the watch host uses it (docs/observer.md#a-person-types-into-a-session).
    steer_token: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.bearer}"}

    @property
    def steer_headers(self) -> dict[str, str] | None:
        return None if self.steer_token is None else {"Authorization": f"Bearer {self.steer_token}"}


def observer_access(paths: LocalPaths) -> ObserverAccess:
    """The running runtime's observer, or :class:`LocalError` saying why there is none."""
    discovery = active(paths)
    if discovery is None:
        raise LocalError(f"Zodex Local is not running; start it with `{zodex_command('local', 'start')}`")
    info = discovery.observability
    base_url = info.get("base_url")
    token_path = info.get("bearer_token_path")
    if not isinstance(base_url, str) or not isinstance(token_path, str):
        raise LocalError("the running runtime advertises no observer API; restart it with a newer zodex")
    try:
        bearer = Path(token_path).read_text().strip()
    except OSError as exc:
        raise LocalError(f"cannot read the observer bearer {token_path}: {exc.strerror}") from exc
    steer_path = info.get("steer_token_path")
    steer_token = None
    if isinstance(steer_path, str):
        try:
            steer_token = Path(steer_path).read_text().strip() or None
        except OSError as exc:
            raise LocalError(f"cannot read the observer steer token {steer_path}: {exc.strerror}") from exc
    return ObserverAccess(base_url.rstrip("/"), bearer, discovery.runtime_id, steer_token)
