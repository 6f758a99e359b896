#!/usr/bin/env python3
"""What an idle worker's private pages are: each page it alone maps, compared with the same
address in its worker template.

    python scripts/bench_worker_pages.py [--workdirs N]

One stdio gateway (``--no-history``, workers forked from the template), ``--workdirs`` (20)
idle workdirs with one call each. For every worker but the first, each page of a writable
mapping that the worker alone maps (``/proc/<pid>/pagemap``'s exclusive bit) is read from
the worker and from the template (``/proc/<pid>/mem``) and counted as:

- *alike*: byte for byte the template's page (written and put back, as a reference count
  raised and lowered again);
- *counts*: every 8-byte word that differs differs by less than 64 (reference counts);
- *other*: anything else (pointers, new objects, freed blocks).

Per worker, by mapping (pymalloc's anonymous arenas, ``[heap]``, the interpreter's data,
the rest), in MB. Needs to read the processes' memory: the same account or root. Nothing
here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import struct
import sys
import tempfile
from pathlib import Path

import psutil
from bench import GATEWAY, Bench, many_workdirs_env, worker_pid
from mcp import Client
from mcp.client.stdio import StdioServerParameters

PAGE = 4096
WORDS = PAGE // 8
PRESENT, EXCLUSIVE = 1 << 63, 1 << 56
KINDS = ("alike", "counts", "other")


def writable_mappings(pid: int) -> list[tuple[int, int, str]]:
    mappings = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if fields[1][1] != "w":
            continue
        start, end = (int(bound, 16) for bound in fields[0].split("-"))
        name = fields[5].strip() if len(fields) == 6 else "[anon]"
        mappings.append((start, end, name))
    return mappings


def group(name: str) -> str:
    base = os.path.basename(name)
    if name in ("[anon]", "[heap]"):
        return name
    if base.startswith(("libpython", "python3")):
        return "interpreter data"
    return "other mappings"


def kind(mine: bytes, theirs: bytes) -> str:
    if mine == theirs:
        return "alike"
    ours, other = struct.unpack(f"<{WORDS}Q", mine), struct.unpack(f"<{WORDS}Q", theirs)
    differing = [(a, b) for a, b in zip(ours, other, strict=True) if a != b]
    return "counts" if all(abs(a - b) < 64 for a, b in differing) else "other"


def private_pages(worker: int, template: int) -> collections.Counter[tuple[str, str]]:
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    with (
        open(f"/proc/{worker}/pagemap", "rb") as pagemap,
        open(f"/proc/{worker}/mem", "rb", buffering=0) as mine,
        open(f"/proc/{template}/mem", "rb", buffering=0) as theirs,
    ):
        for start, end, name in writable_mappings(worker):
            pages = (end - start) // PAGE
            pagemap.seek(start // PAGE * 8)
            entries = struct.unpack(f"<{pages}Q", pagemap.read(pages * 8))
            for i, entry in enumerate(entries):
                if not (entry & PRESENT and entry & EXCLUSIVE):
                    continue
                address = start + i * PAGE
                mine.seek(address)
                page = mine.read(PAGE)
                try:
                    theirs.seek(address)
                    template_page = theirs.read(PAGE)
                except OSError:
                    template_page = b""  # not mapped in the template: made after the fork
                found = kind(page, template_page) if len(template_page) == PAGE else "other"
                counts[group(name), found] += 1
    return counts


async def measure(workdirs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="zxp") as tmp:
        root = Path(tmp)
        env = many_workdirs_env(root, workdirs)
        params = StdioServerParameters(
            command=GATEWAY, args=["stdio", "--no-history"], env=env, cwd=str(root)
        )
        async with Client(params, read_timeout_seconds=300) as client:
            bench = Bench(client, root)
            dirs = [root / f"w{i}" for i in range(workdirs)]
            for workdir in dirs:
                workdir.mkdir()
                await bench.exec("true", workdir)
            workers = [worker_pid(root, d) for d in dirs]
            template = psutil.Process(workers[0]).ppid()
            total: collections.Counter[tuple[str, str]] = collections.Counter()
            for worker in workers[1:]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    total.update(private_pages(worker, template))
    n = len(workers) - 1
    print(f"CPython {sys.version.split()[0]}; MB of private pages per idle worker ({n} workers)")
    print(f"{'mapping':<18}" + "".join(f"{k:>8}" for k in (*KINDS, "all")))
    for name in ("[anon]", "[heap]", "interpreter data", "other mappings", "all"):
        row = [sum(v for (g, k), v in total.items() if k == kind_ and name in (g, "all")) for kind_ in KINDS]
        print(f"{name:<18}" + "".join(f"{pages * PAGE / n / 2**20:8.2f}" for pages in (*row, sum(row))))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdirs", type=int, default=20, help="idle workdirs (at least 2)")
    args = parser.parse_args()
    asyncio.run(measure(max(args.workdirs, 2)))
