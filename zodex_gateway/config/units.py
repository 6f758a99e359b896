"""The value syntax of ``local.toml``: durations, sizes, whole numbers, switches, strings.

Durations always carry a unit (``250ms``, ``30s``, ``10min`` or ``10m``, ``4h``, ``14d``):
a bare number is refused because keys differ in their natural unit and ``timeout = 2``
silently meaning two milliseconds is the kind of mistake a config file should not allow.

Sizes are binary: ``kb``, ``mb`` and ``gb`` are 1024-based, the same as ``kib``, ``mib`` and
``gib`` (so ``16mb`` is 16 MiB, the spill cap of docs/config.md#keys). Units are case-insensitive and
blanks around the number and the unit are ignored.

Hand-written on purpose: unit libraries (pint, humanfriendly, pytimeparse) accept bare
numbers and decimal ``mb``, exactly what this syntax refuses.
"""

from __future__ import annotations

import re


class ConfigError(Exception):
    """A configuration problem, as one line: what was wrong and what is accepted."""


_MS_PER = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_BYTES_PER = {
    "b": 1,
    **dict.fromkeys(("kb", "kib"), 1024),
    **dict.fromkeys(("mb", "mib"), 1024**2),
    **dict.fromkeys(("gb", "gib"), 1024**3),
}
# Canonical display: the largest unit that divides the value exactly, so formatting is lossless.
_DURATION_DISPLAY = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000), ("ms", 1))
_SIZE_DISPLAY = (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024), ("b", 1))

_DURATION_HELP = "a whole number and a unit: ms, s, min (or m), h, d — e.g. 250ms, 30s, 10min, 4h, 14d"
_SIZE_HELP = "a whole number and a unit: b, kb, mb, gb (1024-based; kib, mib, gib also accepted) — e.g. 16mb"
_NUMBER_AND_UNIT = re.compile(r"([0-9]+)\s*([a-z]*)", re.ASCII)
_MAX_DIGITS = 18  # far beyond any sensible value; keeps int() away from giant inputs
_TRUE = ("true", "on", "yes")
_FALSE = ("false", "off", "no")


def _number_and_unit(text: str, what: str, accepted: str, units: dict[str, int]) -> int:
    cleaned = text.strip().lower()
    if not cleaned:
        raise ConfigError(f"empty {what}; give {accepted}")
    if re.match(r"-\s*[0-9]", cleaned, re.ASCII):  # not "--help": that is no number at all
        raise ConfigError(f"{what} cannot be negative: {text.strip()!r}; give {accepted}")
    match = _NUMBER_AND_UNIT.fullmatch(cleaned)
    if match is None:
        hint = " (no fractions: use a smaller unit, e.g. 90min for 1.5h)" if "." in cleaned else ""
        raise ConfigError(f"not a {what}: {text.strip()!r}{hint}; give {accepted}")
    digits, unit = match.groups()
    if not unit:
        raise ConfigError(f"{text.strip()!r} has no unit; always give one: {accepted}")
    if unit not in units:
        raise ConfigError(f"unknown unit {unit!r} in {text.strip()!r}; give {accepted}")
    if len(digits.lstrip("0")) > _MAX_DIGITS:
        raise ConfigError(f"{what} too large: {text.strip()!r}")
    return int(digits) * units[unit]


def parse_duration_ms(text: str) -> int:
    """``"10min"`` -> 600000. Zero is syntactically fine; each key decides its own range."""
    return _number_and_unit(text, "duration", _DURATION_HELP, _MS_PER)


def parse_size_bytes(text: str) -> int:
    """``"16mb"`` -> 16777216 (binary multiples)."""
    return _number_and_unit(text, "size", _SIZE_HELP, _BYTES_PER)


def _largest_exact_unit(value: int, table: tuple[tuple[str, int], ...]) -> str:
    if value < 0:
        raise ValueError(f"cannot format a negative quantity: {value}")
    for unit, factor in table:
        if value and value % factor == 0:
            return f"{value // factor}{unit}"
    return f"0{table[-1][0]}"


def format_duration_ms(ms: int) -> str:
    return _largest_exact_unit(ms, _DURATION_DISPLAY)


def format_size_bytes(size: int) -> str:
    return _largest_exact_unit(size, _SIZE_DISPLAY)


def parse_int(text: str) -> int:
    cleaned = text.strip()
    plain = "a whole number written as plain digits (e.g. 16000)"
    if re.fullmatch(r"-[0-9]+", cleaned, re.ASCII):
        raise ConfigError(f"number cannot be negative: {cleaned!r}; give {plain}")
    if not re.fullmatch(r"[0-9]+", cleaned, re.ASCII):
        raise ConfigError(f"expected {plain}, got {cleaned!r}")
    if len(cleaned.lstrip("0")) > _MAX_DIGITS:
        raise ConfigError(f"number too large: {cleaned!r}")
    return int(cleaned)


def parse_bool(text: str) -> bool:
    cleaned = text.strip().lower()
    if cleaned in _TRUE:
        return True
    if cleaned in _FALSE:
        return False
    raise ConfigError(f"expected on/off (also true/false, yes/no), got {text.strip()!r}")
