#!/usr/bin/env python3
"""``seq`` throughput with history on against history off, in interleaved blocks of one run.

    .venv/bin/python scripts/bench_history_seq.py [--blocks 6] [--runs 2] [--code TREE]

Starts two stdio gateways of this tree (or ``--code``'s, through ``PYTHONPATH``), each with
its own state and workdir: one recording history, one started with ``--no-history``. Each
block runs both in turn, the side going first alternating from block to block; each side
starts after ``sync`` and one run that is not counted, then ``--runs`` runs of ``seq 1
1000000`` to the end through the MCP tools, so each counted run meets what its own side's
earlier runs left for the kernel to write back and nothing of the other side's.

Per block it prints each side's wall time per run, the ratio history on / off in
throughput (off's time over on's: the issue's goal is ≥ 0.95× in every block), each
gateway's CPU per run (``/proc/<pid>/task/*/schedstat``, every thread: CPU survives a busy
machine, wall time does not) and the load average when the block began; then the medians
and the lowest block.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import GATEWAY, Bench, settle
from bench_capture_cpu import threads

SEQ = "seq 1 1000000"


def gateway_pids() -> dict[bool, int]:
    """This process's two gateways, by whether they record history."""
    found: dict[bool, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == os.getpid() and any(b"zodex-gateway" in part for part in cmdline):
            found[b"--no-history" not in cmdline] = int(entry)
    if set(found) != {True, False}:
        raise RuntimeError(f"expected two gateways, found {found}")
    return found


def cpu_ms(pid: int) -> float:
    return sum(threads(pid).values())


class Side:
    def __init__(self, bench: Bench, workdir: Path, pid: int) -> None:
        self.bench, self.workdir, self.pid = bench, workdir, pid

    async def block(self, runs: int) -> tuple[float, float]:
        """(wall s, gateway CPU ms) per counted run."""
        settle()
        await self.bench.run_to_end(SEQ, self.workdir)
        cpu_before, started = cpu_ms(self.pid), time.perf_counter()
        for _ in range(runs):
            result = await self.bench.run_to_end(SEQ, self.workdir)
            assert result["output_lines"] == 1_000_000, result
        return (time.perf_counter() - started) / runs, (cpu_ms(self.pid) - cpu_before) / runs


async def measure(blocks: int, runs: int, code: str | None) -> None:
    root = Path(tempfile.mkdtemp(prefix="zx-history-seq-"))
    try:
        sides: dict[bool, Side] = {}
        async with AsyncExitStack() as stack:
            benches = {}
            for history in (True, False):
                base = root / ("on" if history else "off")
                (base / "run").mkdir(parents=True, mode=0o700)
                (base / "w").mkdir()
                env = {
                    **os.environ,
                    "XDG_STATE_HOME": str(base / "state"),
                    "XDG_RUNTIME_DIR": str(base / "run"),
                }
                if code:
                    env["PYTHONPATH"] = code
                args = ["stdio"] if history else ["stdio", "--no-history"]
                params = StdioServerParameters(command=GATEWAY, args=args, env=env, cwd=str(base))
                client = await stack.enter_async_context(Client(params, read_timeout_seconds=300))
                benches[history] = Bench(client, base)
                await benches[history].trivial(5, base / "w")
            pids = gateway_pids()
            for history, bench in benches.items():
                sides[history] = Side(bench, bench.root / "w", pids[history])
            print(f"{blocks} blocks of {runs} run(s) of `{SEQ}` a side; code: {code or 'this tree'}")
            print("block  load1  on s/run  off s/run  on/off  gateway CPU on / off ms/run")
            ratios, on_times, off_times, on_cpu, off_cpu = [], [], [], [], []
            for block in range(blocks):
                load = os.getloadavg()[0]
                order = (True, False) if block % 2 == 0 else (False, True)
                got = {history: await sides[history].block(runs) for history in order}
                (on_s, on_ms), (off_s, off_ms) = got[True], got[False]
                ratios.append(off_s / on_s)
                on_times.append(on_s)
                off_times.append(off_s)
                on_cpu.append(on_ms)
                off_cpu.append(off_ms)
                print(
                    f"{block + 1:>5}  {load:5.1f}  {on_s:8.3f}  {off_s:9.3f}  {off_s / on_s:5.2f}x"
                    f"  {on_ms:7.1f} / {off_ms:.1f}"
                )
        on_median, off_median = statistics.median(on_times), statistics.median(off_times)
        print(
            f"medians: on {on_median:.3f} s, off {off_median:.3f} s, on/off {off_median / on_median:.2f}x;"
            f" lowest block {min(ratios):.2f}x, highest {max(ratios):.2f}x;"
            f" gateway CPU per run on {statistics.median(on_cpu):.1f} / off {statistics.median(off_cpu):.1f} ms"
            f" (history's share {statistics.median(on_cpu) - statistics.median(off_cpu):.1f} ms);"
            f" load average now {os.getloadavg()[0]:.1f}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2, help="counted runs per side in each block")
    parser.add_argument("--code", help="another tree, run through PYTHONPATH")
    args = parser.parse_args()
    asyncio.run(measure(args.blocks, args.runs, args.code))


if __name__ == "__main__":
    main()
