"""Stdin and stdout served on the event loop when they are pipes or sockets.

The SDK's ``stdio_server()`` reads every line and writes every message in a worker thread
(``anyio.wrap_file``): three thread hand-offs per call, each a wake-up of another thread
and of the loop, which on a busy machine cost more than the rest of the gateway's work for
a trivial call (docs/benchmarks.md#where-the-time-goes). Given streams of its own it skips
both the threads and its claim on fds 0 and 1, so this module makes the same claim itself:
the wire is served from private duplicates while fd 0 reads the null device and fd 1
writes to stderr (a handler's or child's stray output never reaches the wire), and both
are put back on exit.

Only pipes and sockets are served this way: the loop sets its descriptors non-blocking,
and a terminal or file shared with the shell that started us must not be changed. Any other
stdin or stdout keeps the SDK's threads.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import io
import os
import stat
from collections.abc import AsyncIterator
from typing import Final

_READ_SIZE: Final = 256 * 1024


def is_pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class LineReader:
    """Lines of UTF-8 text from a non-blocking descriptor, decoded as the SDK's text wrapper
    decodes them: invalid bytes replaced, ``\\r\\n`` and ``\\r`` read as ``\\n``."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._decoder = io.IncrementalNewlineDecoder(
            codecs.getincrementaldecoder("utf-8")(errors="replace"), translate=True
        )
        self._pending = ""
        self._lines: list[str] = []
        self._eof = False

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._eof:
                raise StopAsyncIteration
            chunk = await self._read()
            text = self._pending + self._decoder.decode(chunk, final=not chunk)
            if not chunk:
                self._eof = True
                self._pending = ""
                if text:
                    self._lines.append(text)  # a last line without its newline, as readline gives it
                break
            parts = text.split("\n")
            self._pending = parts.pop()
            self._lines.extend(part + "\n" for part in parts)
            self._lines.reverse()
        if not self._lines:
            raise StopAsyncIteration
        return self._lines.pop()

    async def _read(self) -> bytes:
        try:
            return os.read(self._fd, _READ_SIZE)  # usually ready: the loop woke us for it
        except BlockingIOError:
            pass
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(self._fd, ready.set_result, None)
        try:
            while True:
                await ready
                try:
                    return os.read(self._fd, _READ_SIZE)
                except BlockingIOError:
                    ready = loop.create_future()
                    loop.add_reader(self._fd, ready.set_result, None)
        finally:
            loop.remove_reader(self._fd)


class LineWriter:
    """Text written to a non-blocking descriptor through the loop's pipe transport; ``flush``
    waits until the transport's buffer has drained below its high-water mark."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


@contextlib.asynccontextmanager
async def loop_stdio() -> AsyncIterator[tuple[LineReader, LineWriter] | None]:
    """The wire's reader and writer on the loop, fds 0 and 1 claimed meanwhile; None when
    stdin or stdout is not a pipe or a socket (the caller then uses the SDK's threads)."""
    if not (is_pipe_or_socket(0) and is_pipe_or_socket(1)):
        yield None
        return
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    os.set_blocking(wire_in, False)
    loop = asyncio.get_running_loop()
    out_file = os.fdopen(wire_out, "wb", buffering=0, closefd=False)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out_file)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    try:
        yield LineReader(wire_in), LineWriter(writer)
    finally:
        with contextlib.suppress(Exception):
            await writer.drain()
        transport.close()
        # Put the wire back where it was, blocking again, for whatever runs after us.
        for wire, fd in ((wire_in, 0), (wire_out, 1)):
            with contextlib.suppress(OSError):
                os.set_blocking(wire, True)
                os.dup2(wire, fd)
            with contextlib.suppress(OSError):
                os.close(wire)
