#!/usr/bin/env python3
"""What a session cgroup costs per command, against the same spawn without one.

    .venv/bin/python scripts/bench_cgroups.py [--runs 400]

Spawns ``/bin/true`` on a fresh PTY exactly as a worker does (``spawn_terminal``), with the
worker's extra threads running, and times each spawn until the child has exited and been
collected: once plainly, once through ``SessionGroups.spawn_in`` (make the group, move this
process in, spawn, move back) plus the group's removal. Prints p50/p90 of both, the
difference and the ratio. Needs a writable cgroup2 hierarchy (root, or a delegated slice).
Runs alternate between the two paths so that machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zodex_system import cgroups, runtime_cgroups
from zodex_worker.pty_backend import spawn_terminal


def _run_once(spawn: object) -> None:
    terminal = spawn()  # type: ignore[operator]
    os.waitpid(terminal.pid, 0)
    terminal.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    stop = threading.Event()
    for _ in range(3):  # a worker has a ZeroMQ I/O thread and an owner watch; moves take all threads
        threading.Thread(target=stop.wait, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        runtime_id = f"bench{os.getpid()}"
        runtime_dir = Path(tmp) / runtime_id  # a runtime directory is named for its runtime
        runtime_dir.mkdir()
        runtime = runtime_cgroups.create_runtime_group(runtime_dir, runtime_id)
        if runtime is None:
            print("no writable cgroup2 hierarchy here; nothing to measure")
            return 1
        try:
            groups = cgroups.SessionGroups.open(runtime_dir, "bench00", 1)
            assert groups is not None
            workdir = tempfile.gettempdir()
            env = {"PATH": "/usr/bin:/bin"}

            def plain() -> object:
                return spawn_terminal(["/bin/true"], workdir, env)

            plain_ms: list[float] = []
            group_ms: list[float] = []
            for i in range(args.runs + 20):
                started = time.perf_counter()
                _run_once(plain)
                middle = time.perf_counter()
                terminal, group = groups.spawn_in(plain)
                os.waitpid(terminal.pid, 0)  # type: ignore[attr-defined]
                terminal.close()  # type: ignore[attr-defined]
                assert group is not None
                group.remove()
                done = time.perf_counter()
                if i >= 20:  # warm-up
                    plain_ms.append((middle - started) * 1000)
                    group_ms.append((done - middle) * 1000)
            groups.close()
        finally:
            runtime_cgroups.remove_runtime_group(runtime)
            stop.set()

    def p(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100)[q - 1]

    base50, cg50 = statistics.median(plain_ms), statistics.median(group_ms)
    print(f"runs: {args.runs}; spawn of /bin/true on a PTY until collected")
    print(f"without cgroup: p50 {base50:.3f} ms  p90 {p(plain_ms, 90):.3f} ms")
    print(f"with cgroup:    p50 {cg50:.3f} ms  p90 {p(group_ms, 90):.3f} ms")
    print(f"difference at p50: {cg50 - base50:+.3f} ms (target ≤ +0.5 ms); ratio {cg50 / base50:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
