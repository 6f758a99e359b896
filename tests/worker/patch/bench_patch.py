"""Hand-run timing of the patch engine (not collected by pytest):

    .venv/bin/python tests/worker/patch/bench_patch.py

A 200-chunk patch over a 20,000-line file, applied in-process. Variants: chunks in
file order, in reverse order (the out-of-order recovery path), and a file whose lines
carry trailing whitespace the patch lacks (the second matching pass).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from zodex_worker.patch import apply_patch

LINES = 20_000
CHUNKS = 200
RUNS = 15


def make_file(trailing: str) -> list[str]:
    return [f"    value_{i} = compute({i}, 'row {i}'){trailing}" for i in range(LINES)]


def make_patch(reverse: bool) -> str:
    step = LINES // CHUNKS
    chunks: list[list[str]] = []
    for k in range(CHUNKS):
        at = k * step + step // 2
        chunks.append(
            [
                "@@",
                *(f"     value_{i} = compute({i}, 'row {i}')" for i in range(at - 3, at)),
                f"-    value_{at} = compute({at}, 'row {at}')",
                f"+    value_{at} = compute({at}, 'row {at}', fast=True)",
                *(f"     value_{i} = compute({i}, 'row {i}')" for i in range(at + 1, at + 4)),
            ]
        )
    if reverse:
        chunks.reverse()
    body = [line for chunk in chunks for line in chunk]
    return "\n".join(["*** Begin Patch", "*** Update File: big.py", *body, "*** End Patch"])


def measure(label: str, trailing: str, reverse: bool) -> None:
    original = "\n".join(make_file(trailing)) + "\n"
    patch = make_patch(reverse)
    timings: list[float] = []
    with tempfile.TemporaryDirectory() as workdir:
        target = Path(workdir, "big.py")
        for _ in range(RUNS):
            target.write_text(original)
            started = time.perf_counter()
            outcome = apply_patch(patch, workdir)
            timings.append((time.perf_counter() - started) * 1000)
            assert outcome.ok, outcome.text
            assert outcome.files[0].added == CHUNKS
    print(f"{label:<40} median {statistics.median(timings):6.1f} ms   best {min(timings):6.1f} ms")


if __name__ == "__main__":
    measure("in order, exact", "", reverse=False)
    measure("reverse order (out-of-order recovery)", "", reverse=True)
    measure("in order, trailing whitespace (pass 2)", "  ", reverse=False)
