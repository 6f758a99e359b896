"""Sprite mode's settings: ``/etc/zodex/config.toml`` (docs/sprite.md#config).

The file uses Local's syntax and machinery (``zodex_gateway.config``): dotted kebab-case
keys, the part before the dot a TOML table. Sprite's own keys live in ``[sprite]``; Local's
limit keys (``session.*``, ``output.*``, ``worker.*``, ``limits.*``, ``mcp.max-body``,
``http.*``) keep their names, defaults and validation. Keys that mean nothing in Sprite
(history, tunnel, context, ``mcp.read-only-hint``) are refused as unknown, so an operator
never believes a setting works when it is ignored.

Only non-secret settings live here: the key has its own ``0600`` file (``key_file``).
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import socket
import tomllib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final

from zodex_gateway.config.settings import KEYS, LocalConfig
from zodex_gateway.config.units import ConfigError
from zodex_protocol.limits import Limits

if TYPE_CHECKING:
    # Imported when used: it loads uvicorn, which the operator commands do not need.
    from zodex_gateway.web.listener_limits import ListenerLimits

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_PATH",
    "SHARED_KEYS",
    "SPRITE_KEYS",
    "ConfigError",
    "SpriteKey",
    "SpriteSettings",
    "check_account_name",
    "check_sprite_value",
    "default_config_path",
    "load_settings",
    "parse_document",
]

CONFIG_ENV: Final = "ZODEX_SPRITE_CONFIG"
DEFAULT_CONFIG_PATH: Final = Path("/etc/zodex/config.toml")
# The installation's Python and its zodex command, relative to sprite.install-dir.
WORKER_PYTHON: Final = Path("bin/python3")
INSTALLED_ZODEX: Final = Path("bin/zodex")


@dataclass(frozen=True)
class SpriteKey:
    name: str
    kind: str  # "string", "path", "int", "hosts", "url", "account", "address"
    default: str | int | None
    description: str


# fmt: off
_SPRITE_ROWS: tuple[tuple[str, str, str | int | None, str], ...] = (
    ("sprite.address", "address", "0.0.0.0", "the IP address the service listens on"),
    ("sprite.port", "int", 8080, "the TCP port the service listens on"),
    ("sprite.tls-cert", "path", None, "TLS certificate (PEM); with tls-key the service speaks HTTPS"),
    ("sprite.tls-key", "path", None, "TLS private key (PEM) for tls-cert"),
    ("sprite.allowed-hosts", "hosts", None, "comma-separated host[:port] accepted in the Host header; unset accepts any"),
    ("sprite.public-url", "url", None, "the URL clients reach the service at; unset: http(s)://<hostname>:<port>"),
    ("sprite.service-user", "account", "zodex", "the account the network-facing service runs as"),
    ("sprite.agent-user", "account", "zodex-agent", "the account every command runs as"),
    ("sprite.group", "account", "zodex", "the group that may read this file"),
    ("sprite.workspace", "path", "/workspace", "the agent's workspace, the suggested first workdir"),
    ("sprite.state-dir", "path", "/var/lib/zodex", "the key, the status file and logs/"),
    ("sprite.runtime-dir", "path", "/run/zodex", "sockets and the worker registry"),
    ("sprite.install-dir", "path", "/opt/zodex", "the Zodex every account of the Sprite runs (bin/zodex)"),
)
# fmt: on
SPRITE_KEYS: dict[str, SpriteKey] = {row[0]: SpriteKey(*row) for row in _SPRITE_ROWS}

_SHARED_PREFIXES = ("session.", "output.", "worker.", "limits.", "http.", "log.")
SHARED_KEYS: tuple[str, ...] = tuple(
    name for name in KEYS if name.startswith(_SHARED_PREFIXES) or name == "mcp.max-body"
)

# useradd's portable subset: lowercase, starts with a letter or underscore, at most 32.
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}", re.ASCII)
_HOST = re.compile(r"(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(?::[0-9]{1,5})?")
_MAX_PORT = 65535


def default_config_path() -> Path:
    """``$ZODEX_SPRITE_CONFIG`` when set (absolute), else ``/etc/zodex/config.toml``."""
    value = os.environ.get(CONFIG_ENV, "")
    return Path(value) if value else DEFAULT_CONFIG_PATH


def check_account_name(name: str, what: str = "account name") -> str:
    if not _ACCOUNT.fullmatch(name):
        raise ConfigError(
            f"{what} {name!r} is not a valid account name (lowercase letters, digits, _ and -, "
            "starting with a letter or _, at most 32 characters)"
        )
    if name == "root":
        raise ConfigError(f"{what} cannot be root")
    return name


def _check_path(name: str, text: str) -> str:
    if not text.startswith("/"):
        raise ConfigError(f"{name} must be an absolute path, got {text!r}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise ConfigError(f"{name} must be a single line without control characters")
    pure = PurePosixPath(text)
    if ".." in pure.parts:
        raise ConfigError(f"{name} must not contain '..', got {text!r}")
    if str(pure) == "/":
        raise ConfigError(f"{name} cannot be /")
    return str(pure)


def _check_port(name: str, raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ConfigError(f"{name}: expected a port number, got {raw!r}")
    text = str(raw).strip()
    if not re.fullmatch(r"[0-9]{1,6}", text, re.ASCII) or not 1 <= int(text) <= _MAX_PORT:
        raise ConfigError(f"{name} must be a port number from 1 to {_MAX_PORT}, got {text!r}")
    return int(text)


def _check_url(name: str, text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http:// or https:// URL with a host, got {text!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"{name} must not carry a query, a fragment or credentials, got {text!r}")
    try:
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise ConfigError(f"{name} has a bad port: {text!r}") from None
    if any(ch.isspace() or ord(ch) < 0x20 for ch in text):
        raise ConfigError(f"{name} must not contain blanks or control characters")
    return text.rstrip("/")


def _check_hosts(name: str, text: str) -> tuple[str, ...]:
    hosts = tuple(part.strip().lower() for part in text.split(","))
    for host in hosts:
        if not _HOST.fullmatch(host):
            raise ConfigError(f"{name}: {host!r} is not host or host:port")
    return hosts


def check_sprite_value(name: str, raw: object) -> object:
    """One ``[sprite]`` value as the file or a ``setup`` flag gives it, checked and typed."""
    key = SPRITE_KEYS[name]
    if key.kind == "int":
        return _check_port(name, raw)
    if not isinstance(raw, str):
        raise ConfigError(f"{name}: expected a string, got {raw!r}")
    if not raw.strip():
        raise ConfigError(f"{name}: empty value; remove the line to use the default")
    if key.kind == "path":
        return _check_path(name, raw)
    if key.kind == "account":
        return check_account_name(raw, name)
    if key.kind == "url":
        return _check_url(name, raw)
    if key.kind == "hosts":
        return _check_hosts(name, raw)
    if key.kind == "address":
        try:
            return str(ipaddress.ip_address(raw.strip()))
        except ValueError:
            raise ConfigError(
                f"{name} must be an IP address such as 0.0.0.0 or 127.0.0.1, got {raw!r}"
            ) from None
    raise AssertionError(f"unhandled kind {key.kind}")


@dataclass(frozen=True)
class SpriteSettings:
    config_path: Path
    address: str
    port: int
    tls_cert: Path | None
    tls_key: Path | None
    allowed_hosts: tuple[str, ...]  # empty: any Host
    public_url: str | None
    service_user: str
    agent_user: str
    group: str
    workspace: Path
    state_dir: Path
    runtime_dir: Path
    install_dir: Path
    limits: Limits
    max_body: int
    header_timeout_ms: int
    max_pending_connections: int
    cgroups: bool
    log_max_bytes: int
    log_keep: int

    @property
    def key_file(self) -> Path:
        return self.state_dir / "key"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "sprite.log"

    @property
    def status_file(self) -> Path:
        return self.state_dir / "status.json"

    @property
    def worker_python(self) -> Path:
        """The Python of the worker installation ``setup`` makes (docs/sprite.md#files-and-modes):
        workers run as ``[worker_python, "-m", "zodex_worker.main", …]``."""
        return self.install_dir / WORKER_PYTHON

    @property
    def installed_zodex(self) -> Path:
        """The ``zodex`` command ``setup`` installs, which every account of the Sprite can
        run: the unit runs ``<installed_zodex> sprite serve --config <path>``."""
        return self.install_dir / INSTALLED_ZODEX

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def base_url(self) -> str:
        if self.public_url is not None:
            return self.public_url
        return f"{'https' if self.tls else 'http'}://{socket.gethostname()}:{self.port}"

    def local_url(self) -> str:
        """Where this host reaches the service itself (status, health): loopback when it
        listens on every address, else the address it listens on."""
        host = self.address
        if ipaddress.ip_address(host).is_unspecified:
            host = "::1" if ":" in host else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def connector_url(self, key: str) -> str:
        return f"{self.base_url()}/mcp?key={urllib.parse.quote(key, safe='')}"

    def listener_limits(self) -> ListenerLimits:
        from zodex_gateway.web.listener_limits import ListenerLimits

        return ListenerLimits(
            header_timeout_s=self.header_timeout_ms / 1000,
            max_pending=self.max_pending_connections,
            max_body=self.max_body,
        )


def _unknown(name: str) -> ConfigError:
    if name in KEYS:
        return ConfigError(f"{name} is a Local key that Sprite does not use; remove it")
    known = [*SPRITE_KEYS, *SHARED_KEYS]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else "docs/sprite.md#config lists every key"
    return ConfigError(f"unknown key {name!r}; {hint}")


def parse_document(document: Mapping[str, Any], config_path: Path) -> SpriteSettings:
    """Settings from a parsed TOML document; raises ConfigError naming the key."""
    sprite: dict[str, object] = {}
    shared: dict[str, dict[str, object]] = {}
    for section, table in document.items():
        if not isinstance(table, dict):
            raise _unknown(section)
        for leaf, raw in table.items():
            name = f"{section}.{leaf}"
            if name in SPRITE_KEYS:
                sprite[name] = check_sprite_value(name, raw)
            elif name in SHARED_KEYS:
                shared.setdefault(section, {})[leaf] = raw
            else:
                raise _unknown(name)
    local = LocalConfig.from_document(shared)

    def value(name: str) -> Any:
        return sprite.get(name, SPRITE_KEYS[name].default)

    def path(name: str) -> Path | None:
        found = value(name)
        return None if found is None else Path(found)

    if (path("sprite.tls-cert") is None) != (path("sprite.tls-key") is None):
        raise ConfigError("sprite.tls-cert and sprite.tls-key go together: set both or neither")
    accounts = {k: value(k) for k in ("sprite.service-user", "sprite.agent-user")}
    if len(set(accounts.values())) < len(accounts):
        raise ConfigError("sprite.service-user and sprite.agent-user must be different accounts")
    if value("sprite.group") == value("sprite.agent-user"):
        raise ConfigError(
            "sprite.group must not be the agent's own group: the agent must not read the config"
        )
    hosts = value("sprite.allowed-hosts")
    return SpriteSettings(
        config_path=config_path,
        address=value("sprite.address"),
        port=value("sprite.port"),
        tls_cert=path("sprite.tls-cert"),
        tls_key=path("sprite.tls-key"),
        allowed_hosts=() if hosts is None else hosts,
        public_url=value("sprite.public-url"),
        service_user=value("sprite.service-user"),
        agent_user=value("sprite.agent-user"),
        group=value("sprite.group"),
        workspace=Path(value("sprite.workspace")),
        state_dir=Path(value("sprite.state-dir")),
        runtime_dir=Path(value("sprite.runtime-dir")),
        install_dir=Path(value("sprite.install-dir")),
        limits=local.limits(),
        max_body=local.size_bytes("mcp.max-body"),
        header_timeout_ms=local.duration_ms("http.header-timeout"),
        max_pending_connections=local.integer("http.max-pending-connections"),
        cgroups=local.flag("session.cgroups"),
        log_max_bytes=local.size_bytes("log.max-size"),
        log_keep=local.integer("log.keep"),
    )


def read_document(path: Path) -> dict[str, Any]:
    """The file parsed as TOML; a missing file is an error (Sprite has no implicit config)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file; run `zodex sprite setup` first") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def load_settings(path: Path) -> SpriteSettings:
    """Raises ConfigError with one line naming the file and the problem."""
    document = read_document(path)
    try:
        return parse_document(document, path)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
