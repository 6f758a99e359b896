"""A small, forgiving reader for the YAML front matter of a ``SKILL.md``.

Only what skill catalogs need: top-level ``key: value`` lines, with the value plain,
single- or double-quoted (possibly over several lines), or a ``>``/``|`` block scalar.
Nested mappings, lists and anchors are not interpreted; their keys simply do not come
out. A file that does not open with ``---`` or never closes it has no front matter.
The parser never raises: a skill with a damaged header still gets listed, by folder name.
"""

from __future__ import annotations

import re

_FENCE = "---"
_END_FENCES = ("---", "...")
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*))?")
# A block scalar header: style, then chomping and indentation indicators in either order.
_BLOCK = re.compile(r"([>|])(?:[+-]?[1-9]?|[1-9]?[+-]?)[ \t]*(?:#.*)?")
_COMMENT = re.compile(r"[ \t]+#.*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", '"': '"', "\\": "\\", "/": "/", " ": " "}


def parse_front_matter(text: str) -> dict[str, str] | None:
    """The top-level string keys of the front matter, or ``None`` when there is none."""
    lines = [line.rstrip("\r") for line in text.removeprefix("\ufeff").split("\n")]
    if not lines or lines[0].rstrip() != _FENCE:
        return None
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].rstrip() in _END_FENCES)
    except StopIteration:
        return None
    body = lines[1:end]
    fields: dict[str, str] = {}
    i = 0
    while i < len(body):
        match = _KEY.fullmatch(body[i].rstrip())
        i += 1
        if match is None:  # blank, comment, list item, stray indented line
            continue
        continuation: list[str] = []
        while i < len(body) and (not body[i].strip() or body[i][:1] in (" ", "\t")):
            continuation.append(body[i])
            i += 1
        fields[match.group(1)] = _scalar((match.group(2) or "").strip(), continuation)
    return fields


def _scalar(head: str, continuation: list[str]) -> str:
    if _BLOCK.fullmatch(head):
        return _block(head[0] == "|", continuation)
    if head[:1] in ('"', "'"):
        return _quoted(" ".join([head, *(line.strip() for line in continuation)]))
    head = _COMMENT.sub("", head)
    words = [head, *(_COMMENT.sub("", line).strip() for line in continuation)]
    return " ".join(word for word in words if word)


def _block(literal: bool, lines: list[str]) -> str:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    indents = [len(line) - len(line.lstrip(" \t")) for line in lines if line.strip()]
    cut = min(indents, default=0)
    lines = [line[cut:] for line in lines]
    if literal:
        return "\n".join(lines).strip()
    # Folding: a line break between two text lines is a space, a blank line is a break.
    out: list[str] = []
    for line in lines:
        if not line.strip():
            out.append("\n")
        elif out and out[-1] != "\n":
            out.append(" " + line.strip())
        else:
            out.append(line.strip())
    return "".join(out).strip()


def _quoted(raw: str) -> str:
    quote, body = raw[0], raw[1:]
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if quote == "'" and char == "'":
            if body[i + 1 : i + 2] == "'":  # '' is an escaped quote inside single quotes
                out.append("'")
                i += 2
                continue
            break
        if quote == '"' and char == '"':
            break
        if quote == '"' and char == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
            continue
        out.append(char)
        i += 1
    # An unterminated quote keeps what it has: a readable description beats none.
    return "".join(out).strip()
