"""How a viewer on this machine reaches the running runtime's observer API.

The observer advertises itself in ``discovery.json`` (``observability``); its bearer lives
in a ``0600`` file that only this user can read. Viewers (``zodex local watch`` and its
terminal mode) read both here and never hand the bearer to a browser.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.local.lifecycle import LocalError, active
from zodex_gateway.local.paths import LocalPaths

BEARER_CHARS = 64


@dataclass(frozen=True)
class ObserverAccess:
    base_url: str  # e.g. http://127.0.0.1:41234 (no trailing slash)
    bearer: str
    runtime_id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.bearer}"}


def observer_access(paths: LocalPaths) -> ObserverAccess:
    """The running runtime's observer, or :class:`LocalError` saying why there is none."""
    discovery = active(paths)
    if discovery is None:
        raise LocalError("Zodex Local is not running; start it with `zodex local start`")
    info = discovery.observability
    base_url = info.get("base_url")
    token_path = info.get("bearer_token_path")
    if not isinstance(base_url, str) or not isinstance(token_path, str):
        raise LocalError("the running runtime advertises no observer API; restart it with a newer zodex")
    try:
        bearer = Path(token_path).read_text().strip()
    except OSError as exc:
        raise LocalError(f"cannot read the observer bearer {token_path}: {exc.strerror}") from exc
    return ObserverAccess(base_url.rstrip("/"), bearer, discovery.runtime_id)


def read_bearer(path: Path) -> str | None:
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    return value or None


def ensure_bearer(path: Path) -> str:
    """The bearer in ``path``, made (64 hex characters, ``0600``) if there is none yet."""
    return read_bearer(path) or rotate_bearer(path)


def rotate_bearer(path: Path) -> str:
    """Write a fresh bearer atomically; a running observer accepts only it from now on."""
    bearer = secrets.token_hex(BEARER_CHARS // 2)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(bearer + "\n")
    os.replace(tmp, path)
    return bearer
