"""Local mode's operator configuration: ``$XDG_CONFIG_HOME/zodex/local.toml``.

Only non-secret settings live here; tokens and bearers get their own ``0600`` files. Keys
are dotted and kebab-case (``session.timeout``); in the file the part before the dot is a
table::

    [session]
    timeout = "2h"

The file holds only what the operator set; every other key takes its default, and the
defaults of docs/config.md#keys numbers are read from ``zodex_protocol.limits.Limits`` so the two cannot
drift. Value syntax (durations always with a unit, binary sizes) is in ``units``.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import tempfile
import tomllib
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from zodex_protocol.limits import Limits
from zodex_system import xdg

from .operator_command import zodex_command
from .units import (
    ConfigError,
    format_duration_ms,
    format_size_bytes,
    parse_bool,
    parse_duration_ms,
    parse_int,
    parse_size_bytes,
)

__all__ = [
    "KEYS",
    "KINDS",
    "ConfigError",
    "ConfigKey",
    "LocalConfig",
    "config_path",
    "format_value",
    "parse_duration_ms",
    "parse_size_bytes",
]

KINDS = ("duration", "size", "int", "bool", "switch", "string")
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class ConfigKey:
    """One key. Durations are held in ms, sizes in bytes; ``minimum``/``maximum`` use the same unit."""

    name: str
    kind: str
    default: object
    description: str
    limits_field: str | None
    minimum: int | None = None
    maximum: int | None = None


_LIMITS = Limits()
_Bounds = tuple[int | None, int | None]
_DEFAULT_BOUNDS: dict[str, _Bounds] = {
    "duration": (1, 3650 * _DAY_MS),
    "size": (1, 1024**4),
    "int": (1, 1024**3),
}
# Tighter than the kind allows: a ping every millisecond would be a busy loop.
_BOUNDS: dict[str, _Bounds] = {
    "session.max-per-worker": (1, 4096),
    "worker.max-idle": (1, 4096),
    "worker.health-interval": (100, 3650 * _DAY_MS),
    "mcp.max-body": (64 * 1024, 1024**3),
    "http.header-timeout": (100, 3_600_000),
    "http.max-pending-connections": (1, 65536),
    "mcp.port": (1, 65535),
    "log.max-size": (64 * 1024, 1024**4),  # a smaller file would rotate on every few lines
    "log.keep": (1, 100),
    "output.preview-head": (0, 100),  # a percentage; 0: a preview of the end alone
}
# String keys that take one of a few words.
_CHOICES: dict[str, tuple[str, ...]] = {"mcp.token": ("per-start", "persistent")}

# fmt: off
_LIMIT_KEYS = (  # name, kind, Limits field, description
    ("session.exec-yield", "duration", "exec_yield_ms", "how long exec_command waits before answering"),
    ("session.write-yield", "duration", "write_yield_ms", "how long write_stdin waits before answering"),
    ("session.yield-min", "duration", "yield_min_ms", "lowest yield a caller may ask for"),
    ("session.yield-max", "duration", "yield_max_ms", "highest yield a caller may ask for"),
    ("session.poll-settle", "duration", "poll_settle_ms", "quiet time after new output before answering"),
    ("session.progress-interval", "duration", "progress_interval_ms", "time between progress notes of a waiting call"),
    ("session.timeout", "duration", "timeout_ms", "default command timeout"),
    ("session.timeout-min", "duration", "timeout_min_ms", "lowest timeout a caller may ask for"),
    ("session.timeout-max", "duration", "timeout_max_ms", "highest timeout a caller may ask for"),
    ("session.kill-grace", "duration", "kill_grace_ms", "wait between SIGTERM and SIGKILL"),
    ("session.drain", "duration", "drain_ms", "output still read after the leader exits"),
    ("session.max-per-worker", "int", "sessions_per_worker", "live sessions per worker"),
    ("session.tombstone", "duration", "tombstone_s", "how long a finished session's result is kept"),
    ("output.inline-limit", "int", "inline_output_chars", "characters of output returned inline"),
    ("output.preview", "int", "preview_chars", "characters of preview when output spills"),
    ("output.preview-head", "int", "preview_head_percent", "percent of the preview taken from the output's start"),
    ("output.spill-cap", "size", "spill_file_cap_bytes", "largest spill file"),
    ("output.spill-max-age", "duration", "spill_max_age_s", "age at which spill files are removed"),
    ("worker.idle-exit", "duration", "idle_worker_exit_s", "a worker with no live session exits after"),
    ("worker.health-interval", "duration", "health_interval_ms", "how often workers are pinged"),
    ("worker.max-idle", "int", "max_idle_workers", "idle workers kept; the least recently used stop first"),
    ("limits.max-cmd-chars", "int", "max_cmd_chars", "longest exec_command cmd accepted"),
    ("limits.max-chars-chars", "int", "max_chars_chars", "longest write_stdin chars accepted"),
    ("limits.max-patch-chars", "int", "max_patch_chars", "longest apply_patch input accepted"),
)
_OTHER_KEYS = (  # name, kind, default, description
    ("session.cgroups", "switch", True, "each command in its own cgroup where the machine allows"),
    ("history.max-age", "duration", 60 * _DAY_MS, "history older than this is removed"),
    ("history.max-size", "size", 500 * 1024**2, "history is trimmed to this size"),
    ("tunnel.id", "string", None, "tunnel identifier, for the tunnel command"),
    ("tunnel.command", "string", None, "tunnel client command line, started and stopped with Local"),
    ("mcp.read-only-hint", "bool", True, "mark read-only tools with readOnlyHint (docs/tools.md#annotations)"),
    ("mcp.max-body", "size", 64 * 1024**2, "largest MCP request body over HTTP (413 beyond)"),
    ("mcp.port", "int", None, "the MCP port; unset: the last one when free (docs/modes.md#a-stable-address)"),
    ("mcp.token", "string", "persistent", "persistent: one MCP token kept until rotated; per-start: a new one at each start"),
    ("http.header-timeout", "duration", 5000, "an HTTP connection must send its request headers within"),
    ("http.max-pending-connections", "int", 256, "HTTP connections still sending headers; the oldest is closed"),
    ("log.max-size", "size", 8 * 1024**2, "a log file is rotated when it reaches this size"),
    ("log.keep", "int", 3, "rotated log files kept (<name>.1 is the newest)"),
    ("context.global-instructions", "switch", True, "include global instructions"),
    ("context.global-skills", "switch", True, "include global skills"),
    ("context.workdir-hint", "switch", True, "include the workdir hint"),
    ("context.workdir-skills", "switch", True, "include workdir skills"),
)
# fmt: on


def _in_seconds(field: str | None) -> bool:
    return field is not None and field.endswith("_s")


def _key(name: str, kind: str, default: object, description: str, field: str | None) -> ConfigKey:
    low, high = _BOUNDS.get(name) or _DEFAULT_BOUNDS.get(kind, (None, None))
    if _in_seconds(field):
        low = 1000  # a field kept in seconds cannot hold a fraction of one
    return ConfigKey(name, kind, default, description, field, low, high)


def _limit_key(name: str, kind: str, field: str, description: str) -> ConfigKey:
    raw = getattr(_LIMITS, field)
    return _key(name, kind, raw * 1000 if _in_seconds(field) else raw, description, field)


_TABLE = (
    *(_limit_key(*row) for row in _LIMIT_KEYS),
    *(_key(name, kind, default, description, None) for name, kind, default, description in _OTHER_KEYS),
)
KEYS: dict[str, ConfigKey] = {key.name: key for key in _TABLE}

# Pairs (low, high) whose effective values must satisfy low <= high: the clamps must be able
# to contain their own defaults, otherwise every call would be silently clamped.
_ORDERED = (
    ("session.yield-min", "session.yield-max"),
    ("session.yield-min", "session.exec-yield"),
    ("session.exec-yield", "session.yield-max"),
    ("session.yield-min", "session.write-yield"),
    ("session.write-yield", "session.yield-max"),
    ("session.timeout-min", "session.timeout-max"),
    ("session.timeout-min", "session.timeout"),
    ("session.timeout", "session.timeout-max"),
    ("output.preview", "output.inline-limit"),
)
_EXPECTED = {
    "duration": "a duration with a unit such as 30s",
    "size": "a size with a unit such as 16mb",
    "int": "a whole number",
    "bool": "true or false",
    "switch": "on or off",
    "string": "a string",
}


def config_path() -> Path:
    return xdg.config_dir() / "local.toml"


def _lookup(name: str) -> ConfigKey:
    if name in KEYS:
        return KEYS[name]
    leaf = name.rpartition(".")[2]
    by_leaf = [k for k in KEYS if difflib.SequenceMatcher(None, leaf, k.rpartition(".")[2]).ratio() >= 0.8]
    close = list(dict.fromkeys([*difflib.get_close_matches(name, KEYS, n=3, cutoff=0.6), *by_leaf]))[:4]
    listing = zodex_command("local", "config", "get")
    hint = f"did you mean {', '.join(close)}?" if close else f"`{listing}` lists every key"
    raise ConfigError(f"unknown key {name!r}; {hint}")


def _as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an int, got {value!r}")
    return value


def format_value(key: str, value: object) -> str:
    """Canonical display; ``set(key, format_value(key, v))`` stores ``v`` again. Unset is ``""``."""
    kind = _lookup(key).kind
    if value is None:
        return ""
    if kind == "duration":
        return format_duration_ms(_as_int(value))
    if kind == "size":
        return format_size_bytes(_as_int(value))
    if kind == "bool":
        return "true" if value else "false"
    if kind == "switch":
        return "on" if value else "off"
    return str(value)


def _as_typed(text: str) -> str:
    """Bytes that are not UTF-8 reach Python from argv as lone surrogates: show the bytes."""
    try:
        return repr(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:  # a surrogate no byte decodes to (a caller in Python)
        return repr(text)


def _parse(key: ConfigKey, text: str) -> object:
    try:
        if key.kind in ("bool", "switch"):
            return parse_bool(text)
        if key.kind == "string":
            if not text.strip():
                raise ConfigError(
                    f"empty value; `{zodex_command('local', 'config', 'unset', key.name)}` goes back to the default"
                )
            if any(unicodedata.category(ch) == "Cs" for ch in text):
                raise ConfigError(f"not valid UTF-8: {_as_typed(text)}")
            if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in text):
                raise ConfigError("must be a single line without control characters")
            choices = _CHOICES.get(key.name)
            if choices is not None and text not in choices:
                raise ConfigError(f"expected {' or '.join(choices)}, got {text!r}")
            return text
        parse = {"duration": parse_duration_ms, "size": parse_size_bytes, "int": parse_int}[key.kind]
        number = parse(text)
    except ConfigError as exc:
        raise ConfigError(f"{key.name}: {exc}") from None

    def show(n: int) -> str:
        return format_value(key.name, n)

    if key.minimum is not None and number < key.minimum:
        raise ConfigError(f"{key.name}: {show(number)} is below the minimum {show(key.minimum)}")
    if key.maximum is not None and number > key.maximum:
        raise ConfigError(f"{key.name}: {show(number)} is above the maximum {show(key.maximum)}")
    if _in_seconds(key.limits_field) and number % 1000:
        raise ConfigError(f"{key.name}: kept in whole seconds, got {show(number)}")
    return number


def _from_toml(key: ConfigKey, raw: object) -> object:
    """A value as tomllib returned it: strings go through ``_parse``; native ints and booleans are fine too."""
    if isinstance(raw, bool):
        if key.kind in ("bool", "switch"):
            return raw
    elif isinstance(raw, str | int):
        # A TOML integer for a duration reaches the "always give a unit" error this way.
        return _parse(key, str(raw))
    raise ConfigError(f"{key.name}: expected {_EXPECTED[key.kind]}, got {raw!r}")


def _check_order(values: Mapping[str, object], changed: str | None = None) -> None:
    """Enforce ``_ORDERED``; ``changed`` names the key being set so the message says what to do."""

    def effective(name: str) -> tuple[int, str]:
        value = _as_int(values.get(name, KEYS[name].default))
        return value, format_value(name, value)

    for low, high in _ORDERED:
        (lo, lo_text), (hi, hi_text) = effective(low), effective(high)
        if lo <= hi:
            continue
        if changed == high:
            raise ConfigError(f"{high} = {hi_text} would be below {low} ({lo_text}); lower {low} first")
        if changed == low:
            raise ConfigError(f"{low} = {lo_text} would exceed {high} ({hi_text}); raise {high} first")
        raise ConfigError(f"{low} ({lo_text}) must not exceed {high} ({hi_text})")


def _flatten(document: Mapping[str, Any]) -> Iterable[tuple[str, object]]:
    for section, table in document.items():
        if isinstance(table, dict):
            for name, raw in table.items():
                yield f"{section}.{name}", raw
        else:
            yield section, table  # a top-level value: never a known key, reported as unknown


@dataclass
class LocalConfig:
    values: dict[str, object] = field(default_factory=dict)
    """Only the keys set explicitly, typed: ms, bytes, int, bool or str."""

    @classmethod
    def load(cls, path: Path) -> LocalConfig:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read: {exc}") from None
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        try:
            return cls.from_document(document)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> LocalConfig:
        """Typed values of a parsed TOML document holding only these keys (Sprite's config
        file holds them beside its own table and hands them over here)."""
        values: dict[str, object] = {}
        for name, raw in _flatten(document):
            values[name] = _from_toml(_lookup(name), raw)
        _check_order(values)
        return cls(values)

    def get(self, key: str) -> object:
        """The effective value of any key, for display (``format_value``); code that uses a
        value asks for it by kind below."""
        return self.values.get(key, _lookup(key).default)

    def duration_ms(self, key: str) -> int:
        return _as_int(self._of_kind(key, "duration"))

    def size_bytes(self, key: str) -> int:
        return _as_int(self._of_kind(key, "size"))

    def integer(self, key: str) -> int:
        return _as_int(self._of_kind(key, "int"))

    def optional_integer(self, key: str) -> int | None:
        """An int key that may be unset with no default (``mcp.port``)."""
        value = self._of_kind(key, "int")
        return None if value is None else _as_int(value)

    def flag(self, key: str) -> bool:
        return bool(self._of_kind(key, "bool", "switch"))

    def text(self, key: str) -> str | None:
        """A string key's value, or None when it is unset and has no default."""
        value = self._of_kind(key, "string")
        return value if isinstance(value, str) else None

    def _of_kind(self, key: str, *kinds: str) -> object:
        """Asking for a key by the wrong kind is a bug in the caller, not in the file."""
        kind = _lookup(key).kind
        if kind not in kinds:
            raise TypeError(f"{key} is a {kind} key, not {' or '.join(kinds)}")
        return self.get(key)

    def set(self, key: str, text: str) -> None:
        value = _parse(_lookup(key), text)
        _check_order({**self.values, key: value}, changed=key)
        self.values[key] = value

    def unset(self, key: str) -> None:
        """Back to the default; refused if the default would contradict another key that is set."""
        _lookup(key)
        try:
            _check_order({k: v for k, v in self.values.items() if k != key}, changed=key)
        except ConfigError as exc:
            raise ConfigError(
                f"cannot unset {key} (default {format_value(key, KEYS[key].default)}): {exc}"
            ) from None
        self.values.pop(key, None)

    def items(self) -> list[tuple[str, str, bool]]:
        return [(name, format_value(name, self.get(name)), name not in self.values) for name in KEYS]

    def limits(self) -> Limits:
        fields: dict[str, int] = {}
        for key in KEYS.values():
            if key.limits_field is not None:
                value = _as_int(self.get(key.name))
                fields[key.limits_field] = value // 1000 if _in_seconds(key.limits_field) else value
        return Limits(**fields)

    def to_toml(self) -> str:
        lines = [
            "# Zodex Local configuration (written by `zodex local config set`).",
            "# Only keys set explicitly are here; `zodex local config get` shows every key with its default.",
            "# Durations need a unit (ms, s, min, h, d); sizes are 1024-based (kb, mb, gb).",
        ]
        tables: dict[str, dict[str, object]] = {}
        for name in KEYS:  # KEYS order, so the file is stable across saves
            if name in self.values:
                section, _, leaf = name.partition(".")
                tables.setdefault(section, {})[leaf] = self._toml_value(name)
        header = "\n".join(lines) + "\n"
        return f"{header}\n{tomli_w.dumps(tables)}" if tables else header

    def _toml_value(self, name: str) -> object:
        value = self.values[name]
        kind = KEYS[name].kind
        if kind == "int":
            return _as_int(value)
        if kind == "bool":
            return bool(value)
        return format_value(name, value)  # durations, sizes and switches as the operator types them

    def save(self, path: Path) -> None:
        """Atomic: readers see the old file or the new one, never half of it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                out.write(self.to_toml())
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temp, 0o644)  # mkstemp creates 0600; this file holds no secrets
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
