"""The stdio wire served on the event loop: decoding as the SDK's text wrapper decodes, and
fds 0 and 1 claimed while serving and given back after."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from zodex_gateway.serve.stdio_pipes import LineReader, is_pipe_or_socket


async def _lines(chunks: list[bytes]) -> list[str]:
    read, write = os.pipe()
    os.set_blocking(read, False)
    reader = LineReader(read)
    got: list[str] = []

    async def feed() -> None:
        for chunk in chunks:
            os.write(write, chunk)
            await asyncio.sleep(0)  # let the reader see each chunk on its own
        os.close(write)

    feeder = asyncio.create_task(feed())
    async for line in reader:
        got.append(line)
    await feeder
    os.close(read)
    return got


async def test_lines_are_decoded_as_the_sdk_decodes_them() -> None:
    euro = "€".encode()
    chunks = [b'{"a": 1}\r\n{"b"', b": 2}\n" + euro[:1], euro[1:] + b"\xff\rlast"]
    assert await _lines(chunks) == ['{"a": 1}\n', '{"b": 2}\n', "€\ufffd\n", "last"]


async def test_an_empty_stream_has_no_lines() -> None:
    assert await _lines([]) == []


def test_only_pipes_and_sockets_are_served_on_the_loop(tmp_path: Path) -> None:
    read, write = os.pipe()
    plain = os.open(tmp_path / "f", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        assert is_pipe_or_socket(read) and is_pipe_or_socket(write)
        assert not is_pipe_or_socket(plain)
    finally:
        for fd in (read, write, plain):
            os.close(fd)


SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys
    from zodex_gateway.serve.stdio_pipes import loop_stdio

    async def main():
        async with loop_stdio() as wire:
            reader, writer = wire
            os.write(1, b"stray to fd 1\\n")  # a child's or handler's output: not the wire
            async for line in reader:
                await writer.write("echo " + line)
                await writer.flush()
        print("after", os.get_blocking(0), os.get_blocking(1), flush=True)

    asyncio.run(main())
    """
)


def test_the_wire_is_claimed_while_serving_and_given_back(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        input=b"one\ntwo\n",
        capture_output=True,
        timeout=30,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"echo one\necho two\nafter True True\n"
    assert b"stray to fd 1" in done.stderr


def test_a_terminal_or_file_keeps_the_sdk_threads(tmp_path: Path) -> None:
    given = tmp_path / "input"
    given.write_bytes(b"")
    script = "import asyncio\nfrom zodex_gateway.serve.stdio_pipes import loop_stdio\n" + (
        "async def main():\n    async with loop_stdio() as wire:\n        print(wire is None)\nasyncio.run(main())\n"
    )
    with given.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-c", script],
            stdin=stdin,
            capture_output=True,
            timeout=30,
            cwd=Path(__file__).resolve().parents[3],
        )
    assert done.stdout == b"True\n", done.stderr
