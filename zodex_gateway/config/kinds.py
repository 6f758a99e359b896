"""The kinds of value a config key takes, for every mode's file: how one is read and shown.

A value reaches a key as text (a ``zodex local config set`` argument, a ``zodex sprite
setup`` flag) or as what ``tomllib`` returned; both go through ``read``, so a flag and the
file refuse the same values with the same words. Numbers come back as ``int`` (durations in
ms, sizes in bytes), switches as ``bool``, every other kind as ``str`` (a ``hosts`` list as a
tuple), so a value read here can be written back to TOML as it is.

Range checks are the key's (``schema``); a kind knows only its syntax. The number syntax
itself is in ``units``.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
import urllib.parse
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Final

from .units import (
    ConfigError,
    format_duration_ms,
    format_size_bytes,
    parse_bool,
    parse_duration_ms,
    parse_int,
    parse_size_bytes,
)

NUMBER_KINDS: Final = ("duration", "size", "int")
FLAG_KINDS: Final = ("bool", "switch")
# Text kinds: one line of valid UTF-8 first, then each its own syntax.
TEXT_KINDS: Final = (
    "string", "path", "account", "address", "url", "hosts", "host-name", "endpoint", "bind-endpoint",
)  # fmt: skip
KINDS: Final = (*NUMBER_KINDS, *FLAG_KINDS, *TEXT_KINDS)

# What a TOML value of the wrong type is told is expected.
EXPECTED: Final = {
    "duration": "a duration with a unit such as 30s",
    "size": "a size with a unit such as 16mb",
    "int": "a whole number",
    "bool": "true or false",
    "switch": "on or off",
    "string": "a string",
    "path": "an absolute path",
    "account": "an account name",
    "address": "an IP address",
    "url": "an http:// or https:// URL",
    "hosts": "comma-separated host[:port]",
    "host-name": "a host name",
    "endpoint": "tcp://<address>:<port>",
    "bind-endpoint": "tcp://<address>:<port>",
}

# useradd's portable subset: lowercase, starts with a letter or underscore, at most 32.
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}", re.ASCII)
_HOST = re.compile(r"(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(?::[0-9]{1,5})?")
_HOST_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?", re.ASCII)
_DNS = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", re.ASCII)
PORT_BOUNDS: Final = (1, 65535)  # every port: mcp.port, sprite.port, gateway.port, an endpoint's


def shown_bytes(text: str) -> str:
    """Bytes that are not UTF-8 reach Python from argv as lone surrogates: show the bytes."""
    try:
        return repr(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:  # a surrogate no byte decodes to (a caller in Python)
        return repr(text)


def check_account_name(name: str, what: str = "account name") -> str:
    if not _ACCOUNT.fullmatch(name):
        raise ConfigError(
            f"{what} {name!r} is not a valid account name (lowercase letters, digits, _ and -, "
            "starting with a letter or _, at most 32 characters)"
        )
    if name == "root":
        raise ConfigError(f"{what} cannot be root")
    return name


def _path(name: str, text: str) -> str:
    if not text.startswith("/"):
        raise ConfigError(f"{name} must be an absolute path, got {text!r}")
    pure = PurePosixPath(text)
    if ".." in pure.parts:
        raise ConfigError(f"{name} must not contain '..', got {text!r}")
    if str(pure) == "/":
        raise ConfigError(f"{name} cannot be /")
    return str(pure)


def _address(name: str, text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise ConfigError(
            f"{name} must be an IP address such as 0.0.0.0 or 127.0.0.1, got {text!r}"
        ) from None


def _url(name: str, text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http:// or https:// URL with a host, got {text!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"{name} must not carry a query, a fragment or credentials, got {text!r}")
    try:
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise ConfigError(f"{name} has a bad port: {text!r}") from None
    if any(ch.isspace() for ch in text):
        raise ConfigError(f"{name} must not contain blanks or control characters")
    return text.rstrip("/")


def _hosts(name: str, text: str) -> tuple[str, ...]:
    hosts = tuple(part.strip().lower() for part in text.split(","))
    for host in hosts:
        if not _HOST.fullmatch(host):
            raise ConfigError(f"{name}: {host!r} is not host or host:port")
    return hosts


def _host_name(name: str, text: str) -> str:
    if not _HOST_NAME.fullmatch(text):
        raise ConfigError(
            f"{name} must be 1-32 of a-z 0-9 -, starting and ending with a letter or digit, got {text!r}"
        )
    return text


def _endpoint(name: str, text: str, *, names: bool) -> str:
    """``tcp://<IP>:<port>`` (what a host binds); a gateway may also name a host by DNS."""
    address, sep, port = text.removeprefix("tcp://").rpartition(":")
    if not text.startswith("tcp://") or not sep:
        raise ConfigError(f"{name} must be tcp://<address>:<port>, got {text!r}")
    low, high = PORT_BOUNDS
    if not port.isdigit() or not low <= int(port) <= high:
        raise ConfigError(f"{name}: the port must be a number from {low} to {high}, got {port!r}")
    bare = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        if not names or not _DNS.fullmatch(address):
            what = "an IP address or a DNS name" if names else "an IP address (IPv6 in brackets)"
            raise ConfigError(f"{name}: {address!r} is not {what}") from None
    return text


_TEXT_CHECKS: Final[dict[str, Callable[[str, str], object]]] = {
    "path": _path,
    "account": lambda name, text: check_account_name(text, name),
    "address": _address,
    "url": _url,
    "hosts": _hosts,
    "host-name": _host_name,
    "endpoint": lambda name, text: _endpoint(name, text, names=True),
    "bind-endpoint": lambda name, text: _endpoint(name, text, names=False),
}


def read_number(kind: str, name: str, text: str) -> int:
    parse = {"duration": parse_duration_ms, "size": parse_size_bytes, "int": parse_int}[kind]
    try:
        return parse(text)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def read_flag(name: str, text: str) -> bool:
    try:
        return parse_bool(text)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def read_text(kind: str, name: str, text: str, empty_hint: str) -> object:
    """A text kind's value; ``empty_hint`` says how the key goes back to its default."""
    if not text.strip():
        raise ConfigError(f"{name}: empty value; {empty_hint}")
    if any(unicodedata.category(ch) == "Cs" for ch in text):
        raise ConfigError(f"{name}: not valid UTF-8: {shown_bytes(text)}")
    if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in text):
        raise ConfigError(f"{name}: must be a single line without control characters")
    check = _TEXT_CHECKS.get(kind)
    return text if check is None else check(name, text)


def show(kind: str, value: object) -> str:
    """Canonical display: reading it back gives the value again. Unset is ``""``."""
    if value is None:
        return ""
    if kind in NUMBER_KINDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an int, got {value!r}")
        if kind == "duration":
            return format_duration_ms(value)
        return format_size_bytes(value) if kind == "size" else str(value)
    if kind in FLAG_KINDS:
        return ("true" if value else "false") if kind == "bool" else ("on" if value else "off")
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)
