"""``host.toml`` and ``gateway.toml`` (docs/fleet.md#config).

A host's file is Sprite's (accounts, directories, limits) with a ``[host]`` table and
without Sprite's HTTP keys; a gateway's names its listener, its CURVE key and its hosts.
Every refusal is one line naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from zodex_gateway.config import shared_keys
from zodex_gateway.config.schema import Schema, load_file
from zodex_gateway.config.shared_keys import make_key
from zodex_gateway.config.units import ConfigError
from zodex_gateway.sprite.settings import (
    SPRITE_KEYS,
    ListenerFields,
    SpriteSettings,
    listener_fields,
    settings_from,
    sprite_schema,
)

HOST_CONFIG_ENV: Final = "ZODEX_HOST_CONFIG"
GATEWAY_CONFIG_ENV: Final = "ZODEX_GATEWAY_CONFIG"
DEFAULT_HOST_CONFIG: Final = Path("/etc/zodex/host.toml")
DEFAULT_GATEWAY_CONFIG: Final = Path("/etc/zodex/gateway.toml")
DEFAULT_ENDPOINT: Final = "tcp://0.0.0.0:7700"
DEFAULT_MAX_PENDING: Final = 256

# fmt: off
HOST_KEYS: Final = (
    make_key("host.name", "host-name", None, "the host's name (required)"),
    make_key("host.endpoint", "bind-endpoint", DEFAULT_ENDPOINT, "where the host binds its ROUTER"),
    make_key("host.secret-key", "path", None, "the host's CURVE secret key; unset: <sprite.state-dir>/host.key"),
    make_key("host.signing-key", "path", None, "the envelope's signing key; unset: <sprite.state-dir>/signing.key"),
    make_key("host.gateway-keys", "path", None, "the gateways' *.pub; unset: <sprite.state-dir>/gateways"),
    make_key("host.max-pending-connections", "int", DEFAULT_MAX_PENDING, "TCP connections not authenticated yet", bounds=(1, 65536)),
)
# fmt: on
# Sprite's keys that mean nothing without an HTTP listener of the host's own.
SPRITE_HTTP_KEYS: Final = (
    "sprite.address",
    "sprite.port",
    "sprite.tls-cert",
    "sprite.tls-key",
    "sprite.allowed-hosts",
    "sprite.public-url",
    *(key.name for key in shared_keys.HTTP_KEYS),
)
HOST_SCHEMA: Final = sprite_schema(
    {key.name: key for key in (*HOST_KEYS, *SPRITE_KEYS.values()) if key.name not in SPRITE_HTTP_KEYS},
    (*shared_keys.LIMIT_KEYS, *shared_keys.LOG_KEYS),
    dict.fromkeys(
        SPRITE_HTTP_KEYS,
        "is a Sprite HTTP key that a host does not use (hosts speak ZeroMQ, not HTTP); remove it",
    ),
    "docs/fleet.md#hosttoml",
)

GATEWAY_SCHEMA: Final = Schema(
    (
        make_key("gateway.address", "address", "0.0.0.0", "the IP address it listens on for MCP over HTTP"),
        make_key("gateway.port", "int", 8080, "the TCP port", bounds=shared_keys.PORT_BOUNDS),
        make_key("gateway.secret-key", "path", None, "this gateway's CURVE secret key file (required)"),
        *shared_keys.HTTP_KEYS,
    ),
    listing=lambda: "docs/fleet.md#gatewaytoml",
)
# One [[hosts]] table: its keys, named hosts[<i>].<key> in messages.
HOSTS_ENTRY_SCHEMA: Final = Schema(
    (
        make_key("name", "host-name", None, "the host's name (required)"),
        make_key("endpoint", "endpoint", None, "tcp://<IP or DNS name>:<port> (required)"),
        make_key("public-key", "path", None, "the host's CURVE public key file (required)"),
        make_key("signing-key", "path", None, "the host's signing key file (required)"),
        make_key("mcp-key", "path", None, "the key MCP clients give for this host (required)"),
        make_key("workspace", "path", None, "the default workdir named to the model"),
    ),
    listing=lambda: "docs/fleet.md#gatewaytoml",
)
HOSTS_ENTRY_REQUIRED: Final = ("name", "endpoint", "public-key", "signing-key", "mcp-key")


# ---- host.toml -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSettings:
    config_path: Path
    name: str
    endpoint: str
    secret_key: Path
    signing_key: Path
    gateway_keys: Path
    sprite: SpriteSettings  # accounts, directories, limits: Sprite's, unchanged
    max_pending_connections: int = DEFAULT_MAX_PENDING

    @property
    def incarnations_file(self) -> Path:
        return self.sprite.state_dir / "host-incarnations"

    @property
    def log_file(self) -> Path:
        return self.sprite.state_dir / "logs" / "host.log"


def parse_host_document(document: Mapping[str, Any], config_path: Path) -> HostSettings:
    values = HOST_SCHEMA.read(document)
    values.require("host.name")
    sprite = settings_from(values, config_path)

    def key_path(name: str, default: str) -> Path:
        return values.path(name) or sprite.state_dir / default

    return HostSettings(
        config_path=config_path,
        name=str(values.text("host.name")),
        endpoint=str(values.text("host.endpoint")),
        secret_key=key_path("host.secret-key", "host.key"),
        signing_key=key_path("host.signing-key", "signing.key"),
        gateway_keys=key_path("host.gateway-keys", "gateways"),
        sprite=sprite,
        max_pending_connections=values.integer("host.max-pending-connections"),
    )


def load_host_settings(path: Path) -> HostSettings:
    missing = "zodex host keygen and write host.toml (docs/fleet.md#hosttoml)"
    return load_file(path, missing, lambda document: parse_host_document(document, path))


# ---- gateway.toml --------------------------------------------------------------------------


@dataclass(frozen=True)
class HostEntry:
    """One host as a gateway knows it."""

    name: str
    endpoint: str
    public_key: Path
    signing_key: Path
    mcp_key: Path
    workspace: str | None = None  # suggested to the model as its first workdir


@dataclass(frozen=True)
class GatewaySettings(ListenerFields):
    config_path: Path
    address: str
    port: int
    secret_key: Path
    hosts: tuple[HostEntry, ...]


def _host_entry(index: int, table: object) -> HostEntry:
    entry = HOSTS_ENTRY_SCHEMA.read_entry(table, f"hosts[{index}]")
    for leaf in HOSTS_ENTRY_REQUIRED:
        entry.require(leaf)

    def path(leaf: str) -> Path:
        return Path(str(entry.path(leaf)))

    return HostEntry(
        name=str(entry.text("name")),
        endpoint=str(entry.text("endpoint")),
        public_key=path("public-key"),
        signing_key=path("signing-key"),
        mcp_key=path("mcp-key"),
        workspace=None if entry.path("workspace") is None else str(entry.path("workspace")),
    )


def parse_gateway_document(document: Mapping[str, Any], config_path: Path) -> GatewaySettings:
    values = GATEWAY_SCHEMA.read(document, arrays=("hosts",))
    hosts_raw = document.get("hosts", [])
    if not isinstance(hosts_raw, list):
        raise ConfigError("hosts must be [[hosts]] tables, one per host")
    if not hosts_raw:
        raise ConfigError("at least one [[hosts]] table is required")
    hosts = tuple(_host_entry(i, entry) for i, entry in enumerate(hosts_raw))
    names = [h.name for h in hosts]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"hosts: the name {name!r} is given twice")
    values.require("gateway.secret-key", " (make a pair with zodex host keygen)")
    return GatewaySettings(
        config_path=config_path,
        address=str(values.text("gateway.address")),
        port=values.integer("gateway.port"),
        secret_key=Path(str(values.path("gateway.secret-key"))),
        hosts=hosts,
        **listener_fields(values),
    )


def load_gateway_settings(path: Path) -> GatewaySettings:
    missing = "write gateway.toml (docs/fleet.md#gatewaytoml)"
    return load_file(path, missing, lambda document: parse_gateway_document(document, path))
