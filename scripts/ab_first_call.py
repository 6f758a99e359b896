#!/usr/bin/env python3
"""Interleaved A/B of the first call in a fresh workdir between checkouts of Zodex.

    python scripts/ab_first_call.py TREE [TREE ...] [--workdirs 24]

One stdio gateway (``--no-history``, workers forked from its template) per tree, each
tree first on ``PYTHONPATH`` so its gateway, template and workers run its own code. After
20 warm-up calls in one workdir each, ``exec_command true`` in a fresh workdir is timed
end to end, alternating between the gateways, each followed by 3 warm trivial calls in
the warm workdir: prints per tree the p50 of the first calls, of the warm calls made at
the same moments, their ratio (the ``bench.py --workers-only`` figure) and the max. For
example, with the parent commit in a worktree: ``git worktree add --detach /tmp/zx-before HEAD~1``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

sys.path.insert(0, str(Path(__file__).parent))
import bench

SERVER = (
    "import sys; from zodex_gateway.main import main; "
    "sys.argv = ['zodex-gateway', 'stdio', '--no-history']; main()"
)


async def main(trees: list[str], workdirs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="zxf"))
    firsts: dict[str, list[float]] = {tree: [] for tree in trees}
    warm: dict[str, list[float]] = {tree: [] for tree in trees}
    try:
        async with contextlib.AsyncExitStack() as stack:
            benches: dict[str, tuple[bench.Bench, Path]] = {}
            for i, tree in enumerate(trees):
                home = root / str(i)
                (home / "run").mkdir(parents=True, mode=0o700)
                env = {
                    **os.environ,
                    "XDG_STATE_HOME": str(home / "state"),
                    "XDG_RUNTIME_DIR": str(home / "run"),
                    "PYTHONPATH": tree,
                    # Room for every worker of the run: the idle cap would retire some.
                    "ZODEX_LIMITS": f'{{"max_idle_workers": {workdirs + 8}}}',
                }
                params = StdioServerParameters(
                    command=sys.executable, args=["-c", SERVER], env=env, cwd=str(home)
                )
                client = await stack.enter_async_context(Client(params, read_timeout_seconds=300))
                runner = bench.Bench(client, home)
                (home / "warm").mkdir()
                await runner.trivial(20, home / "warm")
                benches[tree] = (runner, home)
            for n in range(workdirs):
                for tree, (runner, home) in benches.items():
                    fresh = home / f"fresh{n}"
                    fresh.mkdir()
                    started = time.perf_counter()
                    await runner.exec("true", fresh)
                    firsts[tree].append(time.perf_counter() - started)
                    warm[tree] += await runner.trivial(3, home / "warm")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for tree in trees:
        first, warm50 = statistics.median(firsts[tree]), statistics.median(warm[tree])
        print(
            f"{tree}: first call p50 {first * 1000:.1f} ms, warm p50 {warm50 * 1000:.2f} ms, "
            f"{first / warm50:.2f}x; max {max(firsts[tree]) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--workdirs", type=int, default=24)
    args = parser.parse_args()
    asyncio.run(main(args.trees, args.workdirs))
