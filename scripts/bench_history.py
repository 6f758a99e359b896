#!/usr/bin/env python3
"""What recording a call costs: the pending write before dispatch and the completion after.

    .venv/bin/python scripts/bench_history.py [--calls 3000] [--dir DIR]

Times ``HistoryStore.begin`` and ``HistoryStore.complete`` as the gateway makes them for a
trivial ``exec_command`` (arguments and result redacted through a snapshot of the secret
registry first), on a history with a size limit, in ``DIR`` (default: a new temporary
directory). Prints p50/p90 of each; the first 500 calls warm the caches and are left out.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zodex_gateway.history import HistoryStore
from zodex_gateway.redaction import SECRETS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(dir=args.dir) as tmp,
        HistoryStore(Path(tmp) / "history", max_bytes=512 * 2**20) as store,
    ):
        agent = store.agent_for("bench")
        call = {"cmd": "true", "workdir": tmp}
        result = {"status": "exited", "exit_code": 0, "output": "", "wall_time_ms": 1.2, "output_lines": 0}
        begin, complete = [], []
        for _ in range(args.calls):
            started = time.perf_counter()
            known = SECRETS.snapshot()
            invocation = store.begin(
                agent_id=agent.agent_id,
                tool_name="exec_command",
                args=known.value(call),
                declared_workdir=known.value(tmp),
                real_workdir=known.value(tmp),
            )
            recorded = time.perf_counter()
            known = SECRETS.snapshot()
            store.complete(invocation, ok=True, result=known.value(result))
            begin.append(recorded - started)
            complete.append(time.perf_counter() - recorded)
    for name, times in (("pending write (begin)", begin[500:]), ("completion write", complete[500:])):
        ordered = sorted(times)
        p50, p90 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.9)]
        print(f"{name:<22} p50 {p50 * 1000:.3f} ms  p90 {p90 * 1000:.3f} ms")


if __name__ == "__main__":
    main()
