"""``host.toml`` and ``gateway.toml`` (docs/fleet.md#config).

A host's file is Sprite's (accounts, directories, limits) with a ``[host]`` table and
without Sprite's HTTP keys; a gateway's names its listener, its CURVE key and its hosts.
Every refusal is one line naming the file and the key.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from zodex_gateway.config.settings import LocalConfig
from zodex_gateway.config.units import ConfigError
from zodex_gateway.sprite.settings import SpriteSettings, parse_document, read_document

if TYPE_CHECKING:
    from zodex_gateway.web.listener_limits import ListenerLimits

HOST_CONFIG_ENV: Final = "ZODEX_HOST_CONFIG"
GATEWAY_CONFIG_ENV: Final = "ZODEX_GATEWAY_CONFIG"
DEFAULT_HOST_CONFIG: Final = Path("/etc/zodex/host.toml")
DEFAULT_GATEWAY_CONFIG: Final = Path("/etc/zodex/gateway.toml")
DEFAULT_ENDPOINT: Final = "tcp://0.0.0.0:7700"

HOST_KEYS: Final = (
    "host.name", "host.endpoint", "host.secret-key", "host.signing-key", "host.gateway-keys",
    "host.max-pending-connections",
)  # fmt: skip
DEFAULT_MAX_PENDING: Final = 256
_MAX_PENDING_RANGE: Final = (1, 65536)
# Sprite's keys that mean nothing without an HTTP listener of the host's own.
SPRITE_HTTP_KEYS: Final = (
    "sprite.address", "sprite.port", "sprite.tls-cert", "sprite.tls-key", "sprite.allowed-hosts",
    "sprite.public-url", "mcp.max-body", "http.header-timeout", "http.max-pending-connections",
)  # fmt: skip
GATEWAY_KEYS: Final = ("gateway.address", "gateway.port", "gateway.secret-key")
GATEWAY_SHARED_KEYS: Final = ("mcp.max-body", "http.header-timeout", "http.max-pending-connections")
HOSTS_ENTRY_KEYS: Final = ("name", "endpoint", "public-key", "signing-key", "mcp-key")
HOSTS_ENTRY_OPTIONAL: Final = ("workspace",)

_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?", re.ASCII)
_DNS = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", re.ASCII)
_MAX_PORT = 65535


def check_host_name(name: object, key: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{key} must be 1-32 of a-z 0-9 -, starting and ending with a letter or digit, got {name!r}"
        )
    return name


def _port(text: str, key: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= _MAX_PORT:
        raise ConfigError(f"{key}: the port must be a number from 1 to {_MAX_PORT}, got {text!r}")
    return int(text)


def check_endpoint(value: object, key: str, *, names: bool) -> str:
    """``tcp://<IP>:<port>`` (a host binds an address); a gateway may also name a host by DNS."""
    if not isinstance(value, str) or not value.startswith("tcp://"):
        raise ConfigError(f"{key} must be tcp://<address>:<port>, got {value!r}")
    rest = value.removeprefix("tcp://")
    address, sep, port = rest.rpartition(":")
    if not sep:
        raise ConfigError(f"{key} must be tcp://<address>:<port>, got {value!r}")
    _port(port, key)
    bare = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        if not names or not _DNS.fullmatch(address):
            what = "an IP address or a DNS name" if names else "an IP address (IPv6 in brackets)"
            raise ConfigError(f"{key}: {address!r} is not {what}") from None
    return value


def _path(value: object, key: str) -> Path:
    if not isinstance(value, str) or not value.startswith("/") or ".." in Path(value).parts:
        raise ConfigError(f"{key} must be an absolute path without '..', got {value!r}")
    return Path(value)


def _unknown(name: str, known: tuple[str, ...], page: str) -> ConfigError:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else f"docs/fleet.md#{page} lists every key"
    return ConfigError(f"unknown key {name!r}; {hint}")


def default_path(env: str, default: Path) -> Path:
    value = os.environ.get(env, "")
    return Path(value) if value else default


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
    own = document.get("host")
    if own is None:
        raise ConfigError("host.name is required (the [host] table is missing)")
    if not isinstance(own, dict):
        raise ConfigError("host must be a table ([host])")
    for leaf in own:
        if f"host.{leaf}" not in HOST_KEYS:
            raise _unknown(f"host.{leaf}", HOST_KEYS, "hosttoml")
    rest: dict[str, Any] = {}
    for section, table in document.items():
        if section == "host":
            continue
        if isinstance(table, dict):
            for leaf in table:
                if f"{section}.{leaf}" in SPRITE_HTTP_KEYS:
                    raise ConfigError(
                        f"{section}.{leaf} is a Sprite HTTP key that a host does not use "
                        "(hosts speak ZeroMQ, not HTTP); remove it"
                    )
        rest[section] = table
    if "name" not in own:
        raise ConfigError("host.name is required")
    sprite = parse_document(rest, config_path)
    state = sprite.state_dir
    return HostSettings(
        config_path=config_path,
        name=check_host_name(own["name"], "host.name"),
        endpoint=check_endpoint(own.get("endpoint", DEFAULT_ENDPOINT), "host.endpoint", names=False),
        secret_key=_path(own.get("secret-key", str(state / "host.key")), "host.secret-key"),
        signing_key=_path(own.get("signing-key", str(state / "signing.key")), "host.signing-key"),
        gateway_keys=_path(own.get("gateway-keys", str(state / "gateways")), "host.gateway-keys"),
        sprite=sprite,
        max_pending_connections=_max_pending(own.get("max-pending-connections", DEFAULT_MAX_PENDING)),
    )


def _max_pending(value: object) -> int:
    low, high = _MAX_PENDING_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(
            f"host.max-pending-connections must be a whole number from {low} to {high}, got {value!r}"
        )
    return value


def load_host_settings(path: Path) -> HostSettings:
    document = _read(path, "zodex host keygen and write host.toml (docs/fleet.md#hosttoml)")
    try:
        return parse_host_document(document, path)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _read(path: Path, hint: str) -> dict[str, Any]:
    try:
        return read_document(path)
    except ConfigError as exc:
        text = str(exc)
        if text.endswith("run `zodex sprite setup` first"):
            raise ConfigError(f"{path}: no such config file; {hint}") from None
        raise


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
class GatewaySettings:
    config_path: Path
    address: str
    port: int
    secret_key: Path
    hosts: tuple[HostEntry, ...]
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


def _host_entry(index: int, entry: object) -> HostEntry:
    where = f"hosts[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table ([[hosts]])")
    for leaf in entry:
        if leaf not in (*HOSTS_ENTRY_KEYS, *HOSTS_ENTRY_OPTIONAL):
            known = tuple(f"{where}.{k}" for k in (*HOSTS_ENTRY_KEYS, *HOSTS_ENTRY_OPTIONAL))
            raise _unknown(f"{where}.{leaf}", known, "gatewaytoml")
    for leaf in HOSTS_ENTRY_KEYS:
        if leaf not in entry:
            raise ConfigError(f"{where}.{leaf} is required")
    return HostEntry(
        name=check_host_name(entry["name"], f"{where}.name"),
        endpoint=check_endpoint(entry["endpoint"], f"{where}.endpoint", names=True),
        public_key=_path(entry["public-key"], f"{where}.public-key"),
        signing_key=_path(entry["signing-key"], f"{where}.signing-key"),
        mcp_key=_path(entry["mcp-key"], f"{where}.mcp-key"),
        workspace=None if "workspace" not in entry else str(_path(entry["workspace"], f"{where}.workspace")),
    )


def parse_gateway_document(document: Mapping[str, Any], config_path: Path) -> GatewaySettings:
    shared: dict[str, dict[str, object]] = {}
    own: dict[str, object] = {}
    hosts_raw: object = []
    for section, table in document.items():
        if section == "hosts":
            hosts_raw = table
            continue
        if not isinstance(table, dict):
            raise _unknown(section, (*GATEWAY_KEYS, *GATEWAY_SHARED_KEYS, "hosts"), "gatewaytoml")
        for leaf, raw in table.items():
            name = f"{section}.{leaf}"
            if name in GATEWAY_KEYS:
                own[name] = raw
            elif name in GATEWAY_SHARED_KEYS:
                shared.setdefault(section, {})[leaf] = raw
            else:
                raise _unknown(name, (*GATEWAY_KEYS, *GATEWAY_SHARED_KEYS), "gatewaytoml")
    if hosts_raw is not None and not isinstance(hosts_raw, list):
        raise ConfigError("hosts must be [[hosts]] tables, one per host")
    if not hosts_raw:
        raise ConfigError("at least one [[hosts]] table is required")
    hosts = tuple(_host_entry(i, entry) for i, entry in enumerate(hosts_raw))
    names = [h.name for h in hosts]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"hosts: the name {name!r} is given twice")
    if "gateway.secret-key" not in own:
        raise ConfigError("gateway.secret-key is required (make a pair with zodex host keygen)")
    address = own.get("gateway.address", "0.0.0.0")
    try:
        address = str(ipaddress.ip_address(str(address)))
    except ValueError:
        raise ConfigError(f"gateway.address must be an IP address, got {address!r}") from None
    port = own.get("gateway.port", 8080)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= _MAX_PORT:
        raise ConfigError(f"gateway.port must be a port number from 1 to {_MAX_PORT}, got {port!r}")
    local = LocalConfig.from_document(shared)
    return GatewaySettings(
        config_path=config_path,
        address=address,
        port=port,
        secret_key=_path(own["gateway.secret-key"], "gateway.secret-key"),
        hosts=hosts,
        max_body=local.size_bytes("mcp.max-body"),
        header_timeout_ms=local.duration_ms("http.header-timeout"),
        max_pending_connections=local.integer("http.max-pending-connections"),
    )


def load_gateway_settings(path: Path) -> GatewaySettings:
    document = _read(path, "write gateway.toml (docs/fleet.md#gatewaytoml)")
    try:
        return parse_gateway_document(document, path)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
