"""Decoding msgpack that another account may have written, within bounds.

A worker's replies and tombstones come from the agent's account in Sprite and on a fleet
host: the agent can write any bytes there. msgpack spends about one byte per empty map, and
Python about a hundred bytes per dict, so unbounded decoding lets a few megabytes cost
gigabytes. :func:`unpack_bounded` caps the entries of every map and array (msgpack's
``max_map_len`` and ``max_array_len``) and the values decoded in all (counted as each
container is built): what a decoding can cost is then a small multiple of its input.
"""

from __future__ import annotations

from typing import Any, Final

import msgpack

# Values any decoding may hold whatever its size, and one more for each this many bytes.
BASE_VALUES: Final = 65_536
BYTES_PER_VALUE: Final = 4
# Every map of a message or a tombstone has a few dozen keys at most.
MAX_MAP_LEN: Final = 256


class TooLarge(ValueError):
    """The data holds more values than its bound."""


def value_budget(size: int) -> int:
    """How many values (map entries and array items, in all) ``size`` bytes may decode to."""
    return BASE_VALUES + size // BYTES_PER_VALUE


class _Counter:
    def __init__(self, budget: int) -> None:
        self.left = budget

    def spend(self, count: int) -> None:
        self.left -= count + 1
        if self.left < 0:
            raise TooLarge("more values than its size allows")


def unpack_bounded(data: bytes | memoryview, budget: int | None = None) -> Any:
    """``data`` decoded (strings as UTF-8); ValueError when it is not msgpack, or holds more
    than ``budget`` values (default :func:`value_budget` of its size) or a container beyond
    the length limits."""
    counter = _Counter(value_budget(len(data)) if budget is None else budget)

    def counted_map(value: dict[Any, Any]) -> dict[Any, Any]:
        counter.spend(len(value))
        return value

    def counted_list(value: list[Any]) -> list[Any]:
        counter.spend(len(value))
        return value

    try:
        return msgpack.unpackb(
            data,
            raw=False,
            max_map_len=MAX_MAP_LEN,
            max_array_len=counter.left,
            max_ext_len=0,
            object_hook=counted_map,
            list_hook=counted_list,
        )
    except TooLarge:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise ValueError(f"not msgpack within its bounds: {exc}") from None
