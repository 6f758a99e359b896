"""The publisher's directory (docs/github.md#the-publishers-files): its settings, the two
Apps' keys, YOLO state and push grants, owned by the publisher account, ``0700`` and
``0600``. Root writes it (``zodex sprite github …``); the publisher reads it. Nothing in it
is ever put in an environment, a command line or a log."""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from .names import InputError, check_repo

__all__ = [
    "DEFAULT_MAX_PUSH_BYTES",
    "Grant",
    "PublisherDir",
    "PublisherSettings",
    "StateError",
    "YoloState",
    "parse_ttl",
]

DEFAULT_MAX_PUSH_BYTES: Final = 128 * 1024 * 1024
SETTINGS: Final = "settings.json"
READER_KEY: Final = "reader-key.pem"
PUBLISHER_KEY: Final = "publisher-key.pem"
CA_FILE: Final = "ca.pem"
CLIENT_SECRET: Final = "publisher-client-secret"
YOLO: Final = "yolo.json"
GRANTS: Final = "grants"
MAX_TTL_SECONDS: Final = 366 * 24 * 3600


class StateError(Exception):
    """The publisher's files are missing or malformed; one line saying which."""


def parse_ttl(raw: str) -> int:
    """``30s``, ``30m``, ``2h``, ``1d`` → seconds; the reference's messages."""
    raw = raw.strip()
    if not raw:
        raise StateError("TTL must not be empty")
    number, unit = raw[:-1], raw[-1]
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(unit)
    if scale is None:
        raise StateError(f"unsupported TTL unit `{unit}`; use s, m, h, or d")
    if not number.isdigit():
        raise StateError(f"failed to parse TTL `{raw}`")
    seconds = int(number) * scale
    if seconds <= 0:
        raise StateError("TTL must be greater than zero")
    if seconds > MAX_TTL_SECONDS:
        raise StateError("TTL is too large")
    return seconds


@dataclass(frozen=True)
class PublisherSettings:
    api_url: str
    web_url: str
    reader_app_id: int
    reader_installation_id: int
    publisher_app_id: int
    publisher_client_id: str
    agent_uids: tuple[int, ...]
    default_base: str = "main"
    branch_prefix: str = "agent"
    max_push_bytes: int = DEFAULT_MAX_PUSH_BYTES

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> PublisherSettings:
        try:
            return cls(
                api_url=str(raw["api_url"]),
                web_url=str(raw["web_url"]),
                reader_app_id=int(raw["reader_app_id"]),
                reader_installation_id=int(raw["reader_installation_id"]),
                publisher_app_id=int(raw["publisher_app_id"]),
                publisher_client_id=str(raw["publisher_client_id"]),
                agent_uids=tuple(int(uid) for uid in raw["agent_uids"]),
                default_base=str(raw.get("default_base", "main")),
                branch_prefix=str(raw.get("branch_prefix", "agent")),
                max_push_bytes=int(raw.get("max_push_bytes", DEFAULT_MAX_PUSH_BYTES)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"publisher settings are malformed: {exc}") from None


@dataclass
class YoloState:
    """Repo → expiry (epoch seconds, None: no TTL); ``everything`` covers every repo of the
    writer App's installations until ``everything_expires``."""

    repos: dict[str, float | None] = field(default_factory=dict)
    everything: bool = False
    everything_expires: float | None = None

    def refusal(self, repo: str, now: float) -> str | None:
        """None when YOLO allows a push to ``repo`` now, else the reference's message."""

        def live(expires: float | None) -> bool:
            return expires is None or expires > now

        if self.everything and live(self.everything_expires):
            return None
        if repo in self.repos and live(self.repos[repo]):
            return None
        if not self.everything and not self.repos:
            return "GitHub YOLO mode is not active"
        if not (self.everything and live(self.everything_expires)) and not any(
            map(live, self.repos.values())
        ):
            return "GitHub YOLO mode has expired"
        return f"GitHub YOLO mode is not active for repo {repo}"

    def active(self) -> bool:
        return self.everything or bool(self.repos)


@dataclass(frozen=True)
class Grant:
    repo: str
    token: str
    created_at: float
    expires_at: float | None
    source: str  # "agent" (request-push) or "operator" (grant-push)
    # After expiry the token is dropped from the file ("") and, with the writer App's client
    # secret, revoked at GitHub; this records whether GitHub confirmed it.
    revoked_at_github: bool = False

    def live(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


class PublisherDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    # --- reading, as the publisher ---------------------------------------------------------

    def settings(self) -> PublisherSettings:
        return PublisherSettings.from_json(self._json(SETTINGS, required=True))

    def reader_key(self) -> bytes:
        return self._bytes(READER_KEY)

    def publisher_key(self) -> bytes:
        return self._bytes(PUBLISHER_KEY)

    def client_secret(self) -> str | None:
        """The writer App's client secret, which GitHub asks for to revoke a user token."""
        try:
            return (self.path / CLIENT_SECRET).read_text().strip() or None
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"{self.path / CLIENT_SECRET} cannot be read: {exc.strerror}") from None

    @property
    def ca_file(self) -> Path | None:
        path = self.path / CA_FILE
        return path if path.exists() else None

    @property
    def mirrors(self) -> Path:
        return self.path / "mirrors"

    @property
    def scratch(self) -> Path:
        """Per-operation git config files carrying a token: 0600, removed after use."""
        return self.path / "scratch"

    @property
    def hooks(self) -> Path:
        return self.path / "hooks"

    def yolo(self) -> YoloState:
        raw = self._json(YOLO, required=False)
        try:
            return YoloState(
                repos={
                    str(k): (None if v is None else float(v)) for k, v in dict(raw.get("repos", {})).items()
                },
                everything=bool(raw.get("everything", False)),
                everything_expires=None
                if raw.get("everything_expires") is None
                else float(raw["everything_expires"]),
            )
        except (TypeError, ValueError) as exc:
            raise StateError(f"YOLO state is malformed: {exc}") from None

    def grants(self) -> list[Grant]:
        found: list[Grant] = []
        directory = self.path / GRANTS
        for entry in sorted(directory.glob("*.json")) if directory.is_dir() else []:
            try:
                found.append(Grant(**json.loads(entry.read_text())))
            except (OSError, ValueError, TypeError):
                continue  # a grant that cannot be read grants nothing
        return found

    def grant(self, repo: str, now: float) -> Grant | None:
        for grant in self.grants():
            if grant.repo == repo and grant.live(now):
                return grant
        return None

    # --- writing -----------------------------------------------------------------------------

    def write_yolo(self, state: YoloState, owner: tuple[int, int]) -> None:
        self._write(YOLO, json.dumps(asdict(state), indent=1).encode(), owner)

    def write_grant(self, grant: Grant, owner: tuple[int, int]) -> None:
        self._write(
            f"{GRANTS}/{grant.repo.replace('/', '__')}.json", json.dumps(asdict(grant)).encode(), owner
        )

    def remove_grant(self, repo: str) -> Grant | None:
        path = self.path / GRANTS / f"{repo.replace('/', '__')}.json"
        try:
            found = Grant(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            found = None
        path.unlink(missing_ok=True)
        return found

    def write_file(self, name: str, data: bytes, owner: tuple[int, int]) -> None:
        self._write(name, data, owner)

    def _write(self, name: str, data: bytes, owner: tuple[int, int]) -> None:
        target = self.path / name
        target.parent.mkdir(mode=0o700, exist_ok=True)
        # Root writes here too: a directory the publisher account swapped for a symlink
        # must not take root's write elsewhere.
        if target.parent.is_symlink() or self.path.is_symlink():
            raise StateError(f"{target.parent} is a symlink; refusing to write {name}")
        if os.geteuid() == 0:
            os.chown(target.parent, *owner)
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            if os.geteuid() == 0:
                os.fchown(fd, *owner)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, target)

    def _json(self, name: str, *, required: bool) -> dict[str, Any]:
        try:
            found = json.loads((self.path / name).read_text())
        except FileNotFoundError:
            if required:
                raise StateError(f"{self.path / name} is missing: run `zodex sprite github setup`") from None
            return {}
        except (OSError, ValueError) as exc:
            raise StateError(f"{self.path / name} cannot be read: {exc}") from None
        if not isinstance(found, dict):
            raise StateError(f"{self.path / name} is not a JSON object")
        return found

    def _bytes(self, name: str) -> bytes:
        try:
            return (self.path / name).read_bytes()
        except OSError as exc:
            raise StateError(f"{self.path / name} cannot be read: {exc.strerror}") from None


def checked_repos(raw: list[str]) -> list[str]:
    try:
        return [check_repo(repo) for repo in raw]
    except InputError as exc:
        raise StateError(str(exc)) from None


def now() -> float:
    return time.time()
