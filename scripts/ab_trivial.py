#!/usr/bin/env python3
"""Interleaved A/B of the stdio trivial call between two checkouts of Zodex.

    python scripts/ab_trivial.py BEFORE_TREE AFTER_TREE [--rounds 3] [--calls 200] [-- gateway args]

Each round starts a ``zodex-gateway stdio`` from each tree in turn (the tree first on
``PYTHONPATH``, so its gateway and workers run its own code) and times trivial
``exec_command`` calls through the real MCP client, as ``scripts/bench.py`` does. Prints each
round's median against the bare-PTY floor and the ratio of the medians. For example, with
the parent commit in a worktree: ``git worktree add --detach /tmp/zodex-before HEAD~1``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

sys.path.insert(0, str(Path(__file__).parent))
import bench

SERVER = (
    "import sys; extra = sys.argv[1:]; from zodex_gateway.main import main; "
    "sys.argv = ['zodex-gateway', 'stdio', *extra]; main()"
)


async def medians(tree: str, calls: int, extra: list[str]) -> float:
    root = Path(tempfile.mkdtemp(prefix="zxa"))
    (root / "run").mkdir(mode=0o700)
    workdir = root / "w"
    workdir.mkdir()
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_RUNTIME_DIR": str(root / "run"),
        "SHELL": "/bin/bash",
        "PYTHONPATH": tree,
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-c", SERVER, *extra], env=env, cwd=str(root)
    )
    try:
        async with Client(params, read_timeout_seconds=300) as client:
            runner = bench.Bench(client, root)
            await runner.trivial(30, workdir)
            return statistics.median(await runner.trivial(calls, workdir))
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def main(before: str, after: str, rounds: int, calls: int, extra: list[str]) -> None:
    floor = statistics.median(bench.floor_trivial(calls))
    results: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(rounds):
        for name, tree in (("before", before), ("after", after)):
            results[name].append(await medians(tree, calls, extra))
    for name, values in results.items():
        print(name, " ".join(f"{v * 1000:.2f} ms ({v / floor:.2f}x)" for v in values))
    print(
        f"after / before, medians of the rounds: {statistics.median(results['after']) / statistics.median(results['before']):.3f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("extra", nargs="*", help="arguments for both gateways, after --")
    args = parser.parse_args()
    asyncio.run(main(args.before, args.after, args.rounds, args.calls, args.extra))
