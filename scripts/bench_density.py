#!/usr/bin/env python3
"""Many live workdirs on one host: their memory, and a trivial call among them.

    python scripts/bench_density.py [--live N] [--samples N]

Two stdio gateways (``--no-history``, workers forked from the template) side by side in one
run: one with a single live workdir, one with ``--live`` (500 by default) live idle
workdirs, each with one call done. Reported:

- the Pss (``/proc/<pid>/smaps_rollup``) summed over the second gateway, its worker
  template and its workers, against 4 GiB, and per further workdir ((sum at N − sum at 1) /
  (N − 1));
- the first call in a fresh workdir p50 while the first 10 and the last 10 are added;
- a trivial call's p99 in one workdir of the crowded gateway against the lone gateway's, in
  alternating blocks, so both meet the same machine (``scripts/bench.py`` runs this in its
  worker section);
- as root on a kernel with KSM, the Pss sum and the p99s again once KSM has scanned the
  workers three times (``bench.ksm_running``: turned on for that, then put back).

The crowded gateway's idle cap (``worker.max-idle``) is raised above ``--live`` through
``ZODEX_LIMITS``, so none is retired. Nothing here asserts; targets are printed beside the
figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import psutil
from bench import (
    GATEWAY,
    Bench,
    Row,
    ksm_running,
    ksm_scanned,
    many_workdirs_env,
    percentile,
    pss_kib,
    runtime_pss_kib,
    settle,
)
from mcp import Client
from mcp.client.stdio import StdioServerParameters

MEMORY_TARGET_KIB = 4 * 1024 * 1024
BLOCK = 50  # trivial calls per block; the two gateways alternate
# What one live worker may take at most, to refuse a run the machine cannot hold.
WORKER_ROOM_KIB = 16 * 1024


def gateway_process(env_mark: str) -> psutil.Process:
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if (
                "zodex-gateway" in " ".join(process.cmdline())
                and process.environ().get("ZODEX_BENCH_GATEWAY") == env_mark
            ):
                return process
    raise RuntimeError(f"no gateway {env_mark}")


def host_pss_kib(gateway: psutil.Process, root: Path, workdirs: list[Path]) -> int:
    """Pss summed over the gateway, its worker template and the workers of ``workdirs``."""
    return pss_kib(gateway.pid) + runtime_pss_kib(gateway, root, workdirs)


def available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


async def density_rows(live: int, samples: int) -> list[Row]:
    if available_kib() < live * WORKER_ROOM_KIB:
        return [
            (
                f"{live} live workdirs",
                "skipped",
                "",
                "",
                f"needs {live * WORKER_ROOM_KIB // 1024} MB available, {available_kib() // 1024} MB are",
            )
        ]
    with tempfile.TemporaryDirectory(prefix="zxd", ignore_cleanup_errors=True) as root:
        return await _density_rows(Path(root), live, samples)


async def _density_rows(root: Path, live: int, samples: int) -> list[Row]:
    base = many_workdirs_env(root, live)
    async with contextlib.AsyncExitStack() as stack:
        benches: dict[str, Bench] = {}
        for name in ("one", "many"):
            params = StdioServerParameters(
                command=GATEWAY,
                args=["stdio", "--no-history"],
                env={**base, "ZODEX_BENCH_GATEWAY": name},
                cwd=str(root),
            )
            client = await stack.enter_async_context(Client(params, read_timeout_seconds=300))
            benches[name] = Bench(client, root)
        lone, crowd = benches["one"], benches["many"]
        crowd_gateway = gateway_process("many")
        (root / "one").mkdir()
        await lone.trivial(20, root / "one")
        workdirs = [root / f"w{i}" for i in range(live)]
        workdirs[0].mkdir()
        await crowd.trivial(20, workdirs[0])
        alone_kib = host_pss_kib(crowd_gateway, root, workdirs[:1])
        firsts: list[float] = []
        for workdir in workdirs[1:]:
            workdir.mkdir()
            started = time.perf_counter()
            await crowd.exec("true", workdir)
            firsts.append(time.perf_counter() - started)
        settle()
        await asyncio.sleep(1.0)  # the last workers' start-up work is done: they are idle
        total_kib = host_pss_kib(crowd_gateway, root, workdirs)
        times = await alternating_trivial(lone, root / "one", crowd, workdirs[0], samples)
        with ksm_running() as why_not:
            if why_not is None:
                await ksm_scanned()
                merged_kib = host_pss_kib(crowd_gateway, root, workdirs)
                # At the same moment: the first workdir's share is already the smaller one.
                merged_alone_kib = host_pss_kib(crowd_gateway, root, workdirs[:1])
                merged_times = await alternating_trivial(lone, root / "one", crowd, workdirs[0], samples)
    per_mb = (total_kib - alone_kib) / (live - 1) / 1024
    one99, many99 = percentile(times["one"], 99), percentile(times["many"], 99)
    one50, many50 = percentile(times["one"], 50), percentile(times["many"], 50)
    first_early, first_late = percentile(firsts[:10], 50), percentile(firsts[-10:], 50)
    rows: list[Row] = [
        (
            f"{live} live idle workdirs, Pss of gateway + template + workers",
            f"{total_kib / 1024:,.0f} MB",
            f"{MEMORY_TARGET_KIB / 1024:,.0f} MB",
            f"{total_kib / MEMORY_TARGET_KIB:.2f}x",
            "≤ 1x (within 4 GiB)",
        ),
        (
            f"PSS per further live workdir, 1 → {live}",
            f"{per_mb:.1f} MB",
            "",
            "",
            f"≤ 5 MB (1 workdir: {alone_kib / 1024:.0f} MB)",
        ),
        (
            f"trivial exec p99 among {live} live workdirs / with one (alternating blocks of {BLOCK})",
            f"{many99 * 1000:.2f} ms",
            f"{one99 * 1000:.2f} ms",
            f"{many99 / one99:.2f}x",
            "≤ 2x",
        ),
        (
            f"trivial exec p50 among {live} live workdirs / with one",
            f"{many50 * 1000:.2f} ms",
            f"{one50 * 1000:.2f} ms",
            f"{many50 / one50:.2f}x",
            "",
        ),
        (
            f"first call in a fresh workdir p50, the last 10 of {live} / the first 10",
            f"{first_late * 1000:.1f} ms",
            f"{first_early * 1000:.1f} ms",
            f"{first_late / first_early:.2f}x",
            "",
        ),
    ]
    if why_not is not None:
        return [*rows, (f"{live} live idle workdirs, KSM running", "skipped", why_not, "", "")]
    merged_per_mb = (merged_kib - merged_alone_kib) / (live - 1) / 1024
    merged_one99, merged_many99 = percentile(merged_times["one"], 99), percentile(merged_times["many"], 99)
    return [
        *rows,
        (
            f"{live} live idle workdirs, KSM running: Pss of gateway + template + workers",
            f"{merged_kib / 1024:,.0f} MB",
            f"{MEMORY_TARGET_KIB / 1024:,.0f} MB",
            f"{merged_kib / MEMORY_TARGET_KIB:.2f}x",
            f"≤ 1x; {merged_per_mb:.1f} MB per further workdir (≤ 5 MB)",
        ),
        (
            f"trivial exec p99 among {live} live workdirs / with one, KSM running",
            f"{merged_many99 * 1000:.2f} ms",
            f"{merged_one99 * 1000:.2f} ms",
            f"{merged_many99 / merged_one99:.2f}x",
            "≤ 2x",
        ),
    ]


async def alternating_trivial(
    lone: Bench, lone_dir: Path, crowd: Bench, crowd_dir: Path, samples: int
) -> dict[str, list[float]]:
    """Trivial call times in both gateways, in alternating blocks: both meet the same machine."""
    times: dict[str, list[float]] = {"one": [], "many": []}
    while len(times["many"]) < samples:
        times["one"] += await lone.trivial(BLOCK, lone_dir)
        times["many"] += await crowd.trivial(BLOCK, crowd_dir)
    return times


def print_rows(rows: list[Row]) -> None:
    header = ("figure", "zodex", "floor", "ratio", "target")
    widths = [max(len(r[i]) for r in [*rows, header]) for i in range(5)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(json.dumps({r[0]: {"zodex": r[1], "floor": r[2], "ratio": r[3]} for r in rows}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--live", type=int, default=500, help="live idle workdirs (at least 2)")
    parser.add_argument("--samples", type=int, default=400, help="trivial calls per gateway")
    args = parser.parse_args()
    if args.live < 2 or args.samples < 1:
        sys.exit("bench_density: --live must be at least 2 and --samples at least 1")
    print_rows(asyncio.run(density_rows(args.live, args.samples)))
