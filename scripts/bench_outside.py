#!/usr/bin/env python3
"""The trivial call as an outside harness sees it: a fresh MCP SDK client per run.

    python scripts/bench_outside.py [--runs 10] [--calls 25]      # alone, with its own floor

Each run is a new process (this file with ``client``) that starts a new
``zodex-gateway stdio`` through the SDK's ``Client`` with its defaults (its stdio transport,
its default protocol negotiation), makes ``--calls`` trivial ``exec_command`` calls (``true``)
in one workdir and prints their times. The first ``EXCLUDED`` calls of each run are left out
(the first one starts the workdir's worker); the rest of all runs are pooled. This is what a
harness that starts its client afresh for every run measures, where ``scripts/bench.py``'s
own figure is taken after 20 warm-up calls in one long-lived client. ``scripts/bench.py``
prints both in one run, beside the bare-PTY floor (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

EXCLUDED = 5  # calls left out at the start of each run


def fresh_client_runs(
    gateway: str, env: dict[str, str], cwd: Path, workdir: Path, runs: int, calls: int
) -> list[list[float]]:
    """Each run's call times (seconds), every call included, from a new client process each."""
    result = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, __file__, "client", gateway, str(workdir), str(calls)],
            env=env,
            cwd=cwd,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        result.append(json.loads(out.strip().splitlines()[-1]))
    return result


def counted(runs: list[list[float]], first: int = EXCLUDED, last: int | None = None) -> list[float]:
    """The calls ``first`` (0-based) up to ``last`` of every run, pooled."""
    return [t for run in runs for t in run[first:last]]


def outside_rows(
    runs: list[list[float]], floor_p50: float, own_p50: float
) -> list[tuple[str, str, str, str, str]]:
    """The rows ``scripts/bench.py`` prints: the outside figure beside its own, both over
    the same run's floor, and the outside calls split in halves to show their warm-up."""
    calls = len(runs[0])
    pooled = counted(runs)
    p50 = statistics.median(pooled)
    half = EXCLUDED + (calls - EXCLUDED) // 2
    early, late = statistics.median(counted(runs, last=half)), statistics.median(counted(runs, half))
    label = f"{len(runs)} fresh clients, calls {EXCLUDED + 1}–{calls} of each"
    return [
        (
            f"trivial exec p50, outside harness ({label})",
            f"{p50 * 1000:.2f} ms",
            f"{floor_p50 * 1000:.2f} ms",
            f"{p50 / floor_p50:.2f}x",
            f"bench's own {own_p50 / floor_p50:.2f}x; outside / own {p50 / own_p50:.2f}x",
        ),
        (
            f"  the same, calls {EXCLUDED + 1}–{half} / {half + 1}–{calls}",
            f"{early * 1000:.2f} / {late * 1000:.2f} ms",
            f"{floor_p50 * 1000:.2f} ms",
            f"{early / floor_p50:.2f}x / {late / floor_p50:.2f}x",
            "",
        ),
    ]


async def client_run(gateway: str, workdir: str, calls: int) -> list[float]:
    """One outside run, in this process: the SDK's client with its defaults."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=gateway, args=["stdio"], env=dict(os.environ), cwd=os.getcwd())
    times = []
    async with Client(params) as client:
        for _ in range(calls):
            started = time.perf_counter()
            result = await client.call_tool("exec_command", {"cmd": "true", "workdir": workdir})
            times.append(time.perf_counter() - started)
            if result.is_error:
                raise RuntimeError(result.content[0].text)  # type: ignore[union-attr]
    return times


def main() -> None:
    if sys.argv[1:2] == ["client"]:
        gateway, workdir, calls = sys.argv[2], sys.argv[3], int(sys.argv[4])
        print(json.dumps(asyncio.run(client_run(gateway, workdir, calls))))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--calls", type=int, default=25, help=f"per run, the first {EXCLUDED} left out")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import bench

    rows = asyncio.run(bench.trivial_rows(args.runs, args.calls))
    print("\n".join("  ".join(row) for row in rows))


if __name__ == "__main__":
    main()
