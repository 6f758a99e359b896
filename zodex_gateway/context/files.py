"""Bounded, non-blocking reads of small text files the user controls."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

# A FIFO or device named AGENTS.md must not hang the gateway: open without blocking and
# read only regular files.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
# How far back from the byte limit a cut may move to end on a whole line.
_LINE_SLACK = 2048


@dataclass(frozen=True)
class Prefix:
    data: bytes
    """At most ``limit + 1`` bytes: one more than the limit tells that the file is longer."""
    size: int
    """The file's size when it was opened (at least ``len(data)``)."""


def read_prefix(path: Path, limit: int) -> Prefix | None:
    """The first ``limit + 1`` bytes of a regular file, or ``None`` if it cannot be read."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        chunks: list[bytes] = []
        wanted = limit + 1
        while wanted > 0:
            chunk = os.read(fd, wanted)
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return Prefix(data, max(info.st_size, len(data)))


def cut_utf8(data: bytes, limit: int) -> bytes:
    """``data`` cut to at most ``limit`` bytes, between UTF-8 characters, on a line end if one is near."""
    if len(data) <= limit:
        return data
    cut = limit
    # data[cut] is the first byte dropped; a continuation byte there means a split character.
    for _ in range(3):
        if cut > 0 and data[cut] & 0xC0 == 0x80:
            cut -= 1
    newline = data.rfind(b"\n", max(0, cut - _LINE_SLACK), cut)
    return data[: newline + 1] if newline >= 0 else data[:cut]
