"""Sprite mode's settings: ``/etc/zodex/config.toml`` (docs/sprite.md#config).

The file is read by the parser every mode uses (``zodex_gateway.config.schema``): dotted
kebab-case keys, the part before the dot a TOML table. Sprite's own keys live in
``[sprite]``; the shared keys (``config.shared_keys``: limits, ``session.cgroups``,
``mcp.max-body``, ``http.*``, ``log.*``) keep Local's names, defaults and checks. Local's
keys that mean nothing in Sprite (history, tunnel, context, ``mcp.read-only-hint``) are
refused as such, so an operator never believes a setting works when it is ignored.

Only non-secret settings live here: the key has its own ``0600`` file (``key_file``).
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from zodex_gateway.config import shared_keys
from zodex_gateway.config.schema import ConfigKey, ConfigValues, Schema, load_file, path_from_env
from zodex_gateway.config.schema import read_document as read_toml
from zodex_gateway.config.settings import KEYS as LOCAL_KEYS
from zodex_gateway.config.units import ConfigError
from zodex_protocol.limits import Limits

if TYPE_CHECKING:
    # Imported when used: it loads uvicorn, which the operator commands do not need.
    from zodex_gateway.web.listener_limits import ListenerLimits

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_PATH",
    "SCHEMA",
    "SHARED_KEYS",
    "SPRITE_KEYS",
    "ConfigError",
    "SpriteSettings",
    "check_sprite_value",
    "default_config_path",
    "load_settings",
    "parse_document",
]

CONFIG_ENV: Final = "ZODEX_SPRITE_CONFIG"
DEFAULT_CONFIG_PATH: Final = Path("/etc/zodex/config.toml")
MISSING_HINT: Final = "run `zodex sprite setup` first"
# The installation's Python and its zodex command, relative to sprite.install-dir.
WORKER_PYTHON: Final = Path("bin/python3")
INSTALLED_ZODEX: Final = Path("bin/zodex")

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
SPRITE_KEYS: dict[str, ConfigKey] = {
    name: shared_keys.make_key(
        name, kind, default, about, bounds=shared_keys.PORT_BOUNDS if kind == "int" else None
    )
    for name, kind, default, about in _SPRITE_ROWS
}
SHARED_KEYS: tuple[str, ...] = tuple(key.name for key in shared_keys.SHARED_KEYS)
UNUSED_LOCAL_KEY: Final = "is a Local key that Sprite does not use; remove it"


def sprite_schema(
    own: Mapping[str, ConfigKey], shared: tuple[ConfigKey, ...], refused: Mapping[str, str], listing: str
) -> Schema:
    """A schema of Sprite's kind (Sprite's and a fleet host's): Local's keys it does not take
    refused as Local's, besides ``refused``."""
    taken = {*own, *(key.name for key in shared)}
    unused = {name: UNUSED_LOCAL_KEY for name in LOCAL_KEYS if name not in taken}
    return Schema(
        (*own.values(), *shared),
        listing=lambda: listing,
        refused={**unused, **refused},
        ordered=shared_keys.ORDERED,
    )


SCHEMA: Final = sprite_schema(SPRITE_KEYS, shared_keys.SHARED_KEYS, {}, "docs/sprite.md#config")


def default_config_path() -> Path:
    """``$ZODEX_SPRITE_CONFIG`` when set (absolute), else ``/etc/zodex/config.toml``."""
    return path_from_env(CONFIG_ENV, DEFAULT_CONFIG_PATH)


def check_sprite_value(name: str, raw: object) -> object:
    """One ``[sprite]`` value as the file or a ``setup`` flag gives it, checked and typed."""
    return SCHEMA.from_toml(SPRITE_KEYS[name].name, raw)


# The fields of a service with an HTTP listener (Sprite's, a fleet gateway's) and their keys.
LISTENER_FIELDS: Final = {
    "max_body": "mcp.max-body",
    "header_timeout_ms": "http.header-timeout",
    "max_pending_connections": "http.max-pending-connections",
}


def listener_fields(values: ConfigValues) -> dict[str, Any]:
    return {field: values.get(name) for field, name in LISTENER_FIELDS.items()}


@dataclass(frozen=True)
class ListenerFields:
    max_body: int
    header_timeout_ms: int
    max_pending_connections: int

    def listener_limits(self) -> ListenerLimits:
        from zodex_gateway.web.listener_limits import ListenerLimits

        return ListenerLimits(
            header_timeout_s=self.header_timeout_ms / 1000,
            max_pending=self.max_pending_connections,
            max_body=self.max_body,
        )


@dataclass(frozen=True)
class SpriteSettings(ListenerFields):
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


def settings_from(values: ConfigValues, config_path: Path) -> SpriteSettings:
    """Settings from values read by a schema of Sprite's kind; the keys a host's schema does
    not take (HTTP's) have their defaults, which a host never uses."""
    read = ConfigValues(SCHEMA, values.values)
    if (read.path("sprite.tls-cert") is None) != (read.path("sprite.tls-key") is None):
        raise ConfigError("sprite.tls-cert and sprite.tls-key go together: set both or neither")
    if read.text("sprite.service-user") == read.text("sprite.agent-user"):
        raise ConfigError("sprite.service-user and sprite.agent-user must be different accounts")
    if read.text("sprite.group") == read.text("sprite.agent-user"):
        raise ConfigError(
            "sprite.group must not be the agent's own group: the agent must not read the config"
        )

    return SpriteSettings(config_path=config_path, limits=read.limits(), **_fields(read))


# SpriteSettings' fields from the shared keys; Sprite's own keys give theirs by name
# (sprite.tls-cert: tls_cert).
_SHARED_FIELDS: Final = {
    **LISTENER_FIELDS,
    "cgroups": "session.cgroups",
    "log_max_bytes": "log.max-size",
    "log_keep": "log.keep",
}


def _fields(read: ConfigValues) -> dict[str, Any]:
    """The effective values, typed by the schema; paths as ``Path``, hosts as a tuple."""
    by_kind: dict[str, Callable[[str], object]] = {"path": read.path, "hosts": read.words}
    own = {
        name.removeprefix("sprite.").replace("-", "_"): by_kind.get(key.kind, read.get)(name)
        for name, key in SPRITE_KEYS.items()
    }
    return {**own, **{field: read.get(name) for field, name in _SHARED_FIELDS.items()}}


def parse_document(document: Mapping[str, Any], config_path: Path) -> SpriteSettings:
    """Settings from a parsed TOML document; raises ConfigError naming the key."""
    # [github] is read by sprite/github/config.py (docs/github.md#config).
    return settings_from(SCHEMA.read({k: v for k, v in document.items() if k != "github"}), config_path)


def read_document(path: Path) -> dict[str, Any]:
    """The file parsed as TOML; a missing file is an error (Sprite has no implicit config)."""
    return read_toml(path, MISSING_HINT)


def load_settings(path: Path) -> SpriteSettings:
    """Raises ConfigError with one line naming the file and the problem."""
    return load_file(path, MISSING_HINT, lambda document: parse_document(document, path))
