"""Local mode's operator configuration: ``$XDG_CONFIG_HOME/zodex/local.toml``.

Only non-secret settings live here; tokens and bearers get their own ``0600`` files. Keys
are dotted and kebab-case (``session.timeout``); in the file the part before the dot is a
table::

    [session]
    timeout = "2h"

The file holds only what the operator set; every other key takes its default. Local takes
every shared key (``shared_keys``) and its own below; the parser is ``schema``'s, the value
syntax (durations always with a unit, binary sizes) ``units``'.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import tomli_w

from zodex_system import xdg

from .kinds import KINDS
from .operator_command import zodex_command
from .schema import ConfigKey, ConfigValues, Schema, load_file
from .shared_keys import DAY_MS, ORDERED, PORT_BOUNDS, SHARED_KEYS, make_key
from .units import ConfigError, parse_duration_ms, parse_size_bytes

__all__ = [
    "KEYS",
    "KINDS",
    "SCHEMA",
    "ConfigError",
    "ConfigKey",
    "LocalConfig",
    "config_path",
    "format_value",
    "parse_duration_ms",
    "parse_size_bytes",
]

# fmt: off
_LOCAL_KEYS = (
    make_key("history.max-age", "duration", 60 * DAY_MS, "history older than this is removed"),
    make_key("history.max-size", "size", 500 * 1024**2, "history is trimmed to this size"),
    make_key("tunnel.id", "string", None, "tunnel identifier, for the tunnel command"),
    make_key("tunnel.command", "string", None, "tunnel client command line, started and stopped with Local"),
    make_key("observer.steer", "switch", False, "a person may type into sessions from Liveboard (docs/observer.md#a-person-types-into-a-session)"),
    make_key("mcp.read-only-hint", "bool", True, "mark read-only tools with readOnlyHint (docs/tools.md#annotations)"),
    make_key("mcp.port", "int", None, "the MCP port; unset: the last one when free (docs/modes.md#a-stable-address)", bounds=PORT_BOUNDS),
    make_key("mcp.token", "string", "persistent", "persistent: one MCP token kept until rotated; per-start: a new one at each start", choices=("per-start", "persistent")),
    make_key("context.global-instructions", "switch", True, "include global instructions"),
    make_key("context.global-skills", "switch", True, "include global skills"),
    make_key("context.workdir-hint", "switch", True, "include the workdir hint"),
    make_key("context.workdir-skills", "switch", True, "include workdir skills"),
)
# fmt: on

SCHEMA = Schema(
    (*SHARED_KEYS, *_LOCAL_KEYS),
    listing=lambda: f"`{zodex_command('local', 'config', 'get')}`",
    empty_hint=lambda name: f"`{zodex_command('local', 'config', 'unset', name)}` goes back to the default",
    ordered=ORDERED,
)
KEYS: dict[str, ConfigKey] = SCHEMA.keys


def config_path() -> Path:
    return xdg.config_dir() / "local.toml"


def format_value(key: str, value: object) -> str:
    """Canonical display; ``set(key, format_value(key, v))`` stores ``v`` again. Unset is ``""``."""
    return SCHEMA.show(key, value)


class LocalConfig(ConfigValues):
    """Only the keys set explicitly, typed: ms, bytes, int, bool or str."""

    def __init__(self, values: dict[str, object] | None = None) -> None:
        super().__init__(SCHEMA, values)

    @classmethod
    def load(cls, path: Path) -> LocalConfig:
        return load_file(path, None, cls.from_document)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> LocalConfig:
        return cls(SCHEMA.read(document).values)

    def set(self, key: str, text: str) -> None:
        value = SCHEMA.parse(key, text)
        SCHEMA.check_order({**self.values, key: value}, changed=key)
        self.values[key] = value

    def unset(self, key: str) -> None:
        """Back to the default; refused if the default would contradict another key that is set."""
        SCHEMA.lookup(key)
        try:
            SCHEMA.check_order({k: v for k, v in self.values.items() if k != key}, changed=key)
        except ConfigError as exc:
            raise ConfigError(
                f"cannot unset {key} (default {format_value(key, KEYS[key].default)}): {exc}"
            ) from None
        self.values.pop(key, None)

    def items(self) -> list[tuple[str, str, bool]]:
        return [(name, format_value(name, self.get(name)), name not in self.values) for name in KEYS]

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
        if kind in ("int", "bool"):
            return value
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
