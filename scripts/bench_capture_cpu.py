#!/usr/bin/env python3
"""What recording command output in history costs in CPU, thread by thread.

    .venv/bin/python scripts/bench_capture_cpu.py [--runs 10] [--code TREE] [--trivial] [-- --no-history]

Starts a stdio gateway (this tree's, or ``--code``'s through ``PYTHONPATH``, as
scripts/bench_ab.py does) with its own state and workdir, drives it with the MCP SDK
client, and runs ``seq 1 1000000`` to the end ``--runs`` times after a warm-up (or a
trivial ``exec_command`` of ``true`` with ``--trivial``). Prints the wall time and the CPU
per run of the gateway and of the worker, and of each of their threads, from
``/proc/<pid>/task/*/schedstat`` (time on a CPU, in ns): CPU survives a busy machine, wall
time does not. Arguments after ``--`` go to ``zodex-gateway stdio``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import GATEWAY, Bench, worker_pid

Threads = dict[tuple[str, str], float]


def threads(pid: int) -> Threads:
    """(tid, name) -> ms on a CPU so far."""
    found: Threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            on_cpu = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except FileNotFoundError:
            continue  # ended meanwhile
        found[(tid, stat[stat.index("(") + 1 : stat.rindex(")")])] = on_cpu / 1e6
    return found


def gateway_pid() -> int:
    """The gateway: this process's child running zodex-gateway."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == os.getpid() and b"zodex-gateway" in cmdline:
            return int(entry)
    raise RuntimeError("no gateway found")


def per_run(before: Threads, after: Threads, runs: int) -> dict[str, float]:
    return {f"{name}:{tid}": (ms - before.get((tid, name), 0.0)) / runs for (tid, name), ms in after.items()}


def show(label: str, spent: dict[str, float]) -> str:
    busy = sorted(((ms, name) for name, ms in spent.items() if ms >= 0.2), reverse=True)
    return (
        f"{label} {sum(spent.values()):.1f} ms (" + ", ".join(f"{name} {ms:.1f}" for ms, name in busy) + ")"
    )


async def measure(runs: int, code: str | None, trivial: bool, extra: list[str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="zx-capture-"))
    try:
        (root / "run").mkdir(mode=0o700)
        workdir = root / "w"
        workdir.mkdir()
        env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "XDG_RUNTIME_DIR": str(root / "run")}
        if code:
            env["PYTHONPATH"] = code
        params = StdioServerParameters(command=GATEWAY, args=["stdio", *extra], env=env, cwd=str(root))
        async with Client(params, read_timeout_seconds=300) as client:
            bench = Bench(client, root)
            await bench.trivial(5, workdir)
            await bench.run_to_end("seq 1 1000000", workdir)
            gateway, worker = gateway_pid(), worker_pid(root, workdir)
            gateway_before, worker_before = threads(gateway), threads(worker)
            started = time.perf_counter()
            for _ in range(runs):
                if trivial:
                    await bench.exec("true", workdir)
                else:
                    await bench.run_to_end("seq 1 1000000", workdir)
            wall = (time.perf_counter() - started) / runs * 1000
            gateway_spent = per_run(gateway_before, threads(gateway), runs)
            worker_spent = per_run(worker_before, threads(worker), runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"wall {wall:.0f} ms per run; CPU per run: {show('gateway', gateway_spent)}; {show('worker', worker_spent)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--code", help="another tree, run through PYTHONPATH")
    parser.add_argument("--trivial", action="store_true", help="exec_command of true instead of seq")
    parser.add_argument("extra", nargs="*", help="arguments for zodex-gateway stdio (after --)")
    args = parser.parse_args()
    asyncio.run(measure(args.runs, args.code, args.trivial, args.extra))


if __name__ == "__main__":
    main()
