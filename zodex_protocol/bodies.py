"""Reading one wire body's fields with their types: what a malformed body is, said once.

Requests are checked with the argument rules of ``validation`` (their messages reach the
model); replies and events, which only a worker sends, are read with :class:`BodyReader`,
whose refusals are protocol failures (``BAD_REQUEST``). Keys a reader does not ask for are
ignored, as a tool call's unknown arguments are. A flat record (a dataclass whose fields
are the body's keys, of plain types) is declared once: :func:`flat_body` and
:func:`read_flat` go by its fields.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from zodex_protocol.errors import ErrorCode, ProtocolError

T = TypeVar("T")
R = TypeVar("R", bound="DataclassInstance")

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def flat_body(record: DataclassInstance) -> dict[str, Any]:
    """The body of a flat record, one whose fields all go on the wire as they are: each under
    its own name, in the order declared (a ``ClassVar`` such as ``TYPE`` is no field)."""
    return {name: getattr(record, name) for name, _type in _fields_of(type(record))}


def read_flat(kind: type[R], body: object, what: str, **choices: tuple[str, ...]) -> R:
    """A flat record back from its body: each field read as its declared type says (an
    optional one may be absent); one named in ``choices`` must be one of its strings."""
    read = BodyReader(body, what)
    values = {
        name: read.choice(name, choices[name]) if name in choices else _READERS[declared](read, name)
        for name, declared in _fields_of(kind)
    }
    return kind(**values)


@functools.cache
def _fields_of(kind: type[DataclassInstance]) -> tuple[tuple[str, object], ...]:
    """A record type's fields as (name, declared type); looked up once per type, as
    events are many."""
    return tuple((f.name, f.type) for f in fields(kind))


def body_map(body: object, what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"{what} needs a map body")
    return body


class BodyReader:
    """Typed access to one body; ``what`` names it in errors (``pong``, ``output`` …)."""

    def __init__(self, body: object, what: str) -> None:
        self._body = body_map(body, what)
        self._what = what

    def _refuse(self, key: str, noun: str) -> NoReturn:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"{self._what}: {key} must be {noun}")

    def _present(self, key: str, noun: str) -> Any:
        value = self._body.get(key)
        if value is None:
            self._refuse(key, noun)
        return value

    def _typed(self, key: str, noun: str, kind: type[T]) -> T:
        """The value at ``key`` if it is a ``kind`` (True and False are no integers here)."""
        value = self._present(key, noun)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            self._refuse(key, noun)
        return value

    def text(self, key: str) -> str:
        return self._typed(key, "a string", str)

    def optional_text(self, key: str) -> str | None:
        """Absent and nil both read as None."""
        return None if self._body.get(key) is None else self.text(key)

    def integer(self, key: str) -> int:
        return self._typed(key, "an integer", int)

    def optional_integer(self, key: str) -> int | None:
        return None if self._body.get(key) is None else self.integer(key)

    def number(self, key: str) -> float:
        value = self._present(key, "a number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._refuse(key, "a number")
        return float(value)

    def flag(self, key: str) -> bool:
        return self._typed(key, "a boolean", bool)

    def optional_flag(self, key: str) -> bool | None:
        return None if self._body.get(key) is None else self.flag(key)

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self.text(key)
        if value not in allowed:
            self._refuse(key, " or ".join(allowed))
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        value = self._present(key, "a list of strings")
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            self._refuse(key, "a list of strings")
        return tuple(value)

    def integers(self, key: str, count: int) -> tuple[int, ...]:
        """Exactly ``count`` integers (a screen's cursor: row and column)."""
        noun = f"a list of {count} integers"
        value = self._present(key, noun)
        if (
            not isinstance(value, list | tuple)
            or len(value) != count
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            self._refuse(key, noun)
        return tuple(value)

    def maps(self, key: str) -> list[BodyReader]:
        value = self._present(key, "a list of maps")
        if not isinstance(value, list | tuple):
            self._refuse(key, "a list of maps")
        return [BodyReader(item, f"{self._what}: {key}[{i}]") for i, item in enumerate(value)]

    def optional_map(self, key: str) -> BodyReader | None:
        value = self._body.get(key)
        return None if value is None else BodyReader(value, f"{self._what}: {key}")

    def has(self, key: str) -> bool:
        return self._body.get(key) is not None


# The declared types of flat records' fields (as written, under ``from __future__ import
# annotations``) and how each is read.
_READERS: dict[object, Callable[[BodyReader, str], Any]] = {
    "str": BodyReader.text,
    "str | None": BodyReader.optional_text,
    "int": BodyReader.integer,
    "int | None": BodyReader.optional_integer,
    "float": BodyReader.number,
    "bool": BodyReader.flag,
    "bool | None": BodyReader.optional_flag,
}
