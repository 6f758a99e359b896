#!/usr/bin/env python3
"""Where a fresh workdir's first call goes, in CPU time, which a busy machine leaves intact.

    python scripts/bench_worker_start.py [--workdirs N] [--no-cgroups]

An in-process supervisor forks a worker for each of N fresh workdirs from its template and
makes two trivial ``exec`` calls in it, then one in a warm workdir. From the kernel's
per-thread accounting (``/proc/<pid>/task/*/schedstat``) and minor-fault counts it prints
the p50 CPU of: the template per fork, the new worker up to ``READY``, its first and second
``exec``, the warm worker's ``exec``, and this gateway's part of each. Beside them, the
same-run floor of a copy-on-write fault: a forked child writing one byte into each of 1,500
pages it shares with its parent. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from zodex_gateway.workers.dispatcher import ZmqDispatcher
from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.supervisor import Supervisor

COW_PAGES = 1500


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` (schedstat: ns on the CPU)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except OSError:  # a thread that ended meanwhile
            pass
    return total


def minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def cow_fault_ns() -> float:
    """The CPU of one copy-on-write fault here: a child writes into pages its parent dirtied."""
    shared = bytearray((COW_PAGES + 16) * 4096)
    for at in range(0, len(shared), 4096):
        shared[at] = 1
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        started = time.process_time_ns()
        for at in range(0, COW_PAGES * 4096, 4096):
            shared[at] = 2
        os.write(write_end, str(time.process_time_ns() - started).encode())
        os._exit(0)
    os.close(write_end)
    spent = int(os.read(read_end, 64))
    os.close(read_end)
    os.waitpid(pid, 0)
    return spent / COW_PAGES


async def measure(workdirs: int, use_cgroups: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="zxs", dir="/tmp"))
    (root / "run").mkdir(mode=0o700)
    os.environ["XDG_RUNTIME_DIR"] = str(root / "run")
    os.environ.pop("ZODEX_WORKER_TEMPLATE", None)
    runtime = Runtime.create(state_dir=root / "state", use_cgroups=use_cgroups)
    supervisor = Supervisor(runtime)
    dispatcher = ZmqDispatcher(supervisor)
    columns: dict[str, list[float]] = {}

    def note(name: str, ns: int) -> None:
        columns.setdefault(name, []).append(ns / 1e6)

    async def exec_in(workdir: Path) -> None:
        await dispatcher.exec_command({"cmd": "true", "workdir": str(workdir)})

    try:
        warm = root / "warm"
        warm.mkdir()
        for _ in range(10):
            await exec_in(warm)
        warm_pid = (await supervisor.worker_for(str(warm))).record.pid
        assert supervisor.template is not None
        template_pid = supervisor.template.template_pid
        assert template_pid is not None, "no worker template: this measures forked workers"
        faults: dict[str, list[float]] = {"to READY": [], "first exec": []}
        for i in range(workdirs):
            fresh = root / f"fresh{i}"
            fresh.mkdir()
            template0, gateway0 = cpu_ns(template_pid), time.process_time_ns()
            pid = (await supervisor.worker_for(str(fresh.resolve()))).record.pid
            ready, gateway1 = cpu_ns(pid), time.process_time_ns()
            note("template, per fork", cpu_ns(template_pid) - template0)
            note("worker to READY", ready)
            note("gateway: the worker's start", gateway1 - gateway0)
            faults["to READY"].append(minor_faults(pid))
            await exec_in(fresh)
            first, gateway2 = cpu_ns(pid), time.process_time_ns()
            faults["first exec"].append(minor_faults(pid) - faults["to READY"][-1])
            note("worker: first exec", first - ready)
            note("gateway: first exec", gateway2 - gateway1)
            await exec_in(fresh)
            note("worker: second exec", cpu_ns(pid) - first)
            note("gateway: second exec", time.process_time_ns() - gateway2)
            before = cpu_ns(warm_pid)
            await exec_in(warm)
            note("warm worker: exec", cpu_ns(warm_pid) - before)
    finally:
        await supervisor.shutdown()
        runtime.release()
    fault_ms = cow_fault_ns() / 1e6
    print(f"CPU p50 over {workdirs} fresh workdirs (cgroups {'on' if use_cgroups else 'off'}):")
    for name, values in columns.items():
        print(f"  {name:32s} {statistics.median(values):6.2f} ms")
    for name, counts in faults.items():
        count = statistics.median(counts)
        print(
            f"  worker minor faults, {name:10s} {count:6.0f}  × {fault_ms * 1000:.1f} µs a "
            f"copy-on-write fault (this run's floor) = {count * fault_ms:.2f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdirs", type=int, default=20, help="fresh workdirs (at least 1)")
    parser.add_argument("--no-cgroups", action="store_true", help="sessions without cgroups")
    args = parser.parse_args()
    if args.workdirs < 1:
        sys.exit("bench_worker_start: --workdirs must be at least 1")
    asyncio.run(measure(args.workdirs, not args.no_cgroups))
