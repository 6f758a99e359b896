"""One parser for every mode's config file: Local's ``local.toml``, Sprite's ``config.toml``,
a fleet host's ``host.toml`` and a gateway's ``gateway.toml`` (docs/config.md).

A mode gives a ``Schema``: its table of keys, the keys it refuses with a reason of its own
(a Local key in Sprite's file), where the full list is written, and how a key goes back to
its default. The schema reads a parsed document into typed values (``ConfigValues``) and
refuses anything else in one line naming the key: an unknown key with the closest names,
a value of the wrong kind, a number out of its key's range, a pair that contradicts itself.
What a mode checks across its own keys (TLS files go together) stays in its module.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from zodex_protocol.limits import Limits

from . import kinds
from .units import ConfigError

_T = TypeVar("_T")
# In a file that is not Local's, a key goes back to its default when its line goes.
FILE_EMPTY_HINT: Final = "remove the line to use the default"


def _remove_the_line(name: str) -> str:
    return FILE_EMPTY_HINT


@dataclass(frozen=True)
class ConfigKey:
    """One key. Durations are held in ms, sizes in bytes; ``minimum``/``maximum`` use the same unit."""

    name: str
    kind: str
    default: object
    description: str
    limits_field: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()  # a string key that takes one of a few words

    @property
    def whole_seconds(self) -> bool:
        """A ``Limits`` field kept in seconds cannot hold a fraction of one."""
        return self.limits_field is not None and self.limits_field.endswith("_s")


class Schema:
    def __init__(
        self,
        keys: Iterable[ConfigKey],
        *,
        listing: Callable[[], str],
        empty_hint: Callable[[str], str] = _remove_the_line,
        refused: Mapping[str, str] | None = None,
        ordered: Iterable[tuple[str, str]] = (),
    ) -> None:
        """``listing`` names where every key is listed (said when no key is close);
        ``empty_hint`` how a key goes back to its default; ``refused`` maps a key this mode
        does not take to why; ``ordered`` pairs (low, high) whose values must satisfy
        low <= high (the pairs with a key not in ``keys`` are left out)."""
        self.keys: dict[str, ConfigKey] = {key.name: key for key in keys}
        self._listing = listing
        self._empty_hint = empty_hint
        self._refused = dict(refused or {})
        self.ordered = tuple((lo, hi) for lo, hi in ordered if lo in self.keys and hi in self.keys)
        self._sections = {name.partition(".")[0] for name in self.keys}

    # ---- keys ----------------------------------------------------------------------------

    def lookup(self, name: str) -> ConfigKey:
        if name in self.keys:
            return self.keys[name]
        raise self.unknown(name)

    def unknown(self, name: str, known: Iterable[str] | None = None) -> ConfigError:
        """The refusal of ``name``: its reason, or the closest of ``known`` (default: this
        schema's keys), or where every key is listed."""
        if name in self._refused:
            return ConfigError(f"{name} {self._refused[name]}")
        if name in self._sections:
            return ConfigError(f"{name} must be a table ([{name}])")
        candidates = list(self.keys if known is None else known)
        leaf = name.rpartition(".")[2]
        by_leaf = [
            k for k in candidates if difflib.SequenceMatcher(None, leaf, k.rpartition(".")[2]).ratio() >= 0.8
        ]
        close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
        close = list(dict.fromkeys([*close, *by_leaf]))[:4]
        hint = f"did you mean {', '.join(close)}?" if close else f"{self._listing()} lists every key"
        return ConfigError(f"unknown key {name!r}; {hint}")

    def default(self, name: str) -> object:
        return self.lookup(name).default

    # ---- values --------------------------------------------------------------------------

    def parse(self, name: str, text: str, shown: str | None = None) -> object:
        """A value given as text, checked against its key's kind, range and choices."""
        key = self.lookup(name)
        shown = shown or name
        if key.kind in kinds.FLAG_KINDS:
            return kinds.read_flag(shown, text)
        if key.kind in kinds.TEXT_KINDS:
            value = kinds.read_text(key.kind, shown, text, self._empty_hint(shown))
            if key.choices and value not in key.choices:
                raise ConfigError(f"{shown}: expected {' or '.join(key.choices)}, got {text!r}")
            return value
        number = kinds.read_number(key.kind, shown, text)
        if key.minimum is not None and number < key.minimum:
            raise ConfigError(
                f"{shown}: {self.show(name, number)} is below the minimum {self.show(name, key.minimum)}"
            )
        if key.maximum is not None and number > key.maximum:
            raise ConfigError(
                f"{shown}: {self.show(name, number)} is above the maximum {self.show(name, key.maximum)}"
            )
        if key.whole_seconds and number % 1000:
            raise ConfigError(f"{shown}: kept in whole seconds, got {self.show(name, number)}")
        return number

    def from_toml(self, name: str, raw: object, shown: str | None = None) -> object:
        """A value as ``tomllib`` returned it: strings and integers go through ``parse`` (a
        TOML integer for a duration reaches the "always give a unit" refusal this way);
        booleans only for flags."""
        key = self.lookup(name)
        if isinstance(raw, bool):
            if key.kind in kinds.FLAG_KINDS:
                return raw
        elif isinstance(raw, str | int):
            return self.parse(name, str(raw), shown)
        raise ConfigError(f"{shown or name}: expected {kinds.EXPECTED[key.kind]}, got {raw!r}")

    def show(self, name: str, value: object) -> str:
        """Canonical display; ``parse(name, show(name, v))`` gives ``v`` again. Unset is ``""``."""
        return kinds.show(self.lookup(name).kind, value)

    def read(self, document: Mapping[str, Any], *, arrays: Iterable[str] = ()) -> ConfigValues:
        """The typed values of a parsed TOML document; the sections named in ``arrays``
        (``[[hosts]]``) are left to the caller. Contradicting pairs are refused."""
        skipped = set(arrays)
        values: dict[str, object] = {}
        for name, raw in _flatten({k: v for k, v in document.items() if k not in skipped}):
            values[name] = self.from_toml(name, raw)
        self.check_order(values)
        return ConfigValues(self, values)

    def read_entry(self, table: object, where: str) -> ConfigValues:
        """One table of an array of tables (``[[hosts]]``), its keys named ``<where>.<leaf>``."""
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table ([[{where.partition('[')[0]}]])")
        values: dict[str, object] = {}
        for leaf, raw in table.items():
            shown = f"{where}.{leaf}"
            if leaf not in self.keys:
                raise self.unknown(shown, [f"{where}.{k}" for k in self.keys])
            values[leaf] = self.from_toml(leaf, raw, shown)
        return ConfigValues(self, values, where=f"{where}.")

    def check_order(self, values: Mapping[str, object], changed: str | None = None) -> None:
        """Enforce ``ordered``; ``changed`` names the key being set so the message says what to do."""

        def effective(name: str) -> tuple[int, str]:
            value = values.get(name, self.keys[name].default)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} is not a number")
            return value, self.show(name, value)

        for low, high in self.ordered:
            (lo, lo_text), (hi, hi_text) = effective(low), effective(high)
            if lo <= hi:
                continue
            if changed == high:
                raise ConfigError(f"{high} = {hi_text} would be below {low} ({lo_text}); lower {low} first")
            if changed == low:
                raise ConfigError(f"{low} = {lo_text} would exceed {high} ({hi_text}); raise {high} first")
            raise ConfigError(f"{low} ({lo_text}) must not exceed {high} ({hi_text})")


def _flatten(document: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    for section, table in document.items():
        if isinstance(table, dict):
            for name, raw in table.items():
                yield f"{section}.{name}", raw
        else:
            yield section, table  # a top-level value: never a known key, refused as unknown


class ConfigValues:
    """The keys a file (or ``config set``) set explicitly, typed, and each key's effective
    value by kind. Asking for a key by the wrong kind is a bug in the caller, not in the file."""

    def __init__(self, schema: Schema, values: dict[str, object] | None = None, *, where: str = "") -> None:
        self.schema = schema
        self.values: dict[str, object] = dict(values or {})
        self._where = where  # how an entry of an array of tables names its keys

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigValues):
            return NotImplemented
        return self.schema is other.schema and self.values == other.values

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dict it holds

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.values!r})"

    def get(self, key: str) -> object:
        """The effective value of any key, for display (``Schema.show``)."""
        return self.values.get(key, self.schema.default(key))

    def require(self, key: str, hint: str = "") -> None:
        if key not in self.values:
            raise ConfigError(f"{self._where}{key} is required{hint}")

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
        return bool(self._of_kind(key, *kinds.FLAG_KINDS))

    def text(self, key: str) -> str | None:
        """A text key's value, or None when it is unset and has no default."""
        text_kinds = tuple(kind for kind in kinds.TEXT_KINDS if kind not in ("path", "hosts"))
        value = self._of_kind(key, *text_kinds)
        return value if isinstance(value, str) else None

    def path(self, key: str) -> Path | None:
        value = self._of_kind(key, "path")
        return Path(value) if isinstance(value, str) else None

    def words(self, key: str) -> tuple[str, ...]:
        """A ``hosts`` key's entries; unset is none."""
        value = self._of_kind(key, "hosts")
        return tuple(str(word) for word in value) if isinstance(value, tuple) else ()

    def limits(self) -> Limits:
        """The ``Limits`` of the keys that set one (fields kept in seconds converted)."""
        fields: dict[str, int] = {}
        for key in self.schema.keys.values():
            if key.limits_field is not None:
                value = _as_int(self.get(key.name))
                fields[key.limits_field] = value // 1000 if key.whole_seconds else value
        return Limits(**fields)

    def _of_kind(self, key: str, *wanted: str) -> object:
        kind = self.schema.lookup(key).kind
        if kind not in wanted:
            raise TypeError(f"{key} is a {kind} key, not {' or '.join(wanted)}")
        return self.get(key)


def _as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an int, got {value!r}")
    return value


# ---- the file ----------------------------------------------------------------------------


def path_from_env(env: str, default: Path) -> Path:
    """``$<env>`` when set and not empty, else ``default``: where a service's file is."""
    value = os.environ.get(env, "")
    return Path(value) if value else default


def read_document(path: Path, missing: str | None) -> dict[str, Any]:
    """The file parsed as TOML. A missing file is empty when ``missing`` is None (Local: every
    key takes its default), else refused with ``missing`` saying how to make it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing is None:
            return {}
        raise ConfigError(f"{path}: no such config file; {missing}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def load_file(path: Path, missing: str | None, parse: Callable[[dict[str, Any]], _T]) -> _T:
    """``parse`` of the file's document; every refusal one line starting with the file."""
    document = read_document(path, missing)
    try:
        return parse(document)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
