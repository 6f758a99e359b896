"""First call in a fresh workdir and PSS per idle workdir in Sprite, with the worker template
and without (docs/benchmarks.md#sprite-worker-starts). Root only: it starts a real
``zodex sprite serve`` with throwaway accounts (tests/sprite/serve/sprite_support.py), once
with the template and once with ``ZODEX_WORKER_TEMPLATE=off``, interleaved in one run.

Each round: 20 warm trivial calls (``true``) in one workdir (the floor), then the first
call in each of ``--fresh`` new workdirs, then the PSS summed over every process of the
agent account (workers, and the template) with 1 and then ``--idle`` workdirs open, and,
with the template on a kernel with KSM, that sum again once KSM has scanned it three times
(``scripts/bench.py``'s ``ksm_running``: turned on for that, then put back). Figures are
printed as ratios against the warm call of the same service.

    sudo .venv/bin/python -m scripts.bench_sprite --fresh 10 --idle 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from scripts.bench import ksm_running, ksm_scanned
from tests.sprite.serve.sprite_support import Sprite, sprite_setup
from tests.support.accounts import processes_of
from tests.support.waiting import wait_until


def pss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:"))


def new_workdir(sprite: Sprite, name: str) -> str:
    path = sprite.workspace / name
    path.mkdir()
    os.chown(path, sprite.agent.uid, sprite.agent.gid)
    return str(path)


async def measure(sprite: Sprite, fresh: int, idle: int, merge: bool) -> dict[str, Any]:
    async with sprite.mcp() as mcp:

        async def call(workdir: str) -> float:
            started = time.perf_counter()
            result = await mcp.call_tool("exec_command", {"cmd": "true", "workdir": workdir})
            assert not result.is_error, result.content[0].text
            return (time.perf_counter() - started) * 1000

        home = new_workdir(sprite, "warm")
        await call(home)
        warm = [await call(home) for _ in range(20)]
        first = [await call(new_workdir(sprite, f"fresh{i}")) for i in range(fresh)]
        # PSS with the workdirs so far open and idle, then with ``idle - 1`` more.
        one = sum(pss_kib(pid) for pid in processes_of(sprite.agent.uid))
        base_count = 1 + fresh
        for i in range(idle - 1):
            await call(new_workdir(sprite, f"idle{i}"))
        many = sum(pss_kib(pid) for pid in processes_of(sprite.agent.uid))
        merged: dict[str, Any] = {}
        if merge:
            with ksm_running() as why_not:
                if why_not is None:
                    await ksm_scanned()
                    merged_kib = sum(pss_kib(pid) for pid in processes_of(sprite.agent.uid))
                    merged = {
                        "ksm_pss_kib": merged_kib,
                        "ksm_pss_kib_per_workdir": round(merged_kib / (base_count + idle - 1)),
                    }
                else:
                    merged = {"ksm": why_not}
    warm_p50 = statistics.median(warm)
    first_p50 = statistics.median(first)
    return {
        "warm_p50_ms": round(warm_p50, 2),
        "first_p50_ms": round(first_p50, 2),
        "first_max_ms": round(max(first), 2),
        "first_over_warm": round(first_p50 / warm_p50, 1),
        "pss_kib_with_workdirs": {base_count: one, base_count + idle - 1: many},
        "pss_kib_per_extra_workdir": round((many - one) / max(idle - 1, 1)),
        **merged,
    }


def run(template: bool, fresh: int, idle: int) -> dict[str, Any]:
    with sprite_setup(start=False) as sprite:
        sprite.start(() if template else ("/usr/bin/env", "ZODEX_WORKER_TEMPLATE=off"))
        if template:
            wait_until(lambda: "worker template ready" in sprite.log_file.read_text(), what="the template")
        return asyncio.run(measure(sprite, fresh, idle, merge=template))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fresh", type=int, default=10, help="fresh workdirs whose first call is timed")
    parser.add_argument("--idle", type=int, default=10, help="idle workdirs whose PSS is summed")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (template, off), interleaved")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    for round_no in range(args.rounds):
        for template in (True, False):
            figures = run(template, args.fresh, args.idle)
            label = "template" if template else "off"
            print(json.dumps({"round": round_no + 1, "workers": label, "load1": round(load, 1), **figures}))


if __name__ == "__main__":
    main()
