#!/usr/bin/env python3
"""Interleaved A/B of two Zodex trees against the bare-PTY floor, on a busy machine.

    python scripts/bench_ab.py --base /tmp/zodex-base [--rounds 10] [--n 200] [--figures ...]

``--base`` is another checkout (``git worktree add --detach /tmp/zodex-base <commit>``); its
code runs through ``PYTHONPATH``, this tree's through the same way, with the same venv. Both
variants are started once and kept running; each round measures a block of calls on each, in
alternating order, next to a block of the floor (``$SHELL -c true`` spawned on a bare PTY, as
``scripts/bench.py`` measures it). Every figure is a ratio taken within its round; the
summary is the median over rounds with the smallest and largest.

Figures: ``stdio`` (trivial ``exec_command`` p50 over stdio), ``http`` (the same on a Local
runtime over MCP's streamable HTTP, one keep-alive connection, and a fresh TCP connection
per call), ``seq`` (``seq 1 1000000`` throughput, history on vs ``--no-history``), ``loaded``
(trivial p99 while 16 sessions each print a line every millisecond).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import psutil
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parent))
from bench import bare_pty_run, percentile

HEAD = str(Path(__file__).resolve().parent.parent)
BIN = Path(sys.executable).parent
SEQ_LINES = 1_000_000


def floor_p50(n: int) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        bare_pty_run("true")
        times.append(time.perf_counter() - started)
    return percentile(times, 50)


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(result.content[0].text)  # type: ignore[union-attr]
    return dict(result.structured_content or {})


async def trivial(client: Client, n: int, workdir: Path) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await call(client, "exec_command", cmd="true", workdir=str(workdir))
        times.append(time.perf_counter() - started)
    return times


async def seq_time(client: Client, workdir: Path) -> float:
    started = time.perf_counter()
    r = await call(
        client, "exec_command", cmd=f"seq 1 {SEQ_LINES}", workdir=str(workdir), yield_time_ms=60000
    )
    while r["status"] == "running":
        r = await call(client, "write_stdin", session_handle=r["session_handle"], yield_time_ms=60000)
    assert r["output_lines"] == SEQ_LINES, r
    return time.perf_counter() - started


class Variant:
    def __init__(self, name: str, code: str, root: Path) -> None:
        self.name, self.code, self.root = name, code, root
        for sub in ("run", "w0", "w1", "w2", "w3"):
            (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "PYTHONPATH": code,
            "XDG_STATE_HOME": str(root / "state"),
            "XDG_RUNTIME_DIR": str(root / "run"),
            "XDG_CONFIG_HOME": str(root / "config"),
        }

    @contextlib.asynccontextmanager
    async def stdio(self, *args: str) -> AsyncIterator[Client]:
        params = StdioServerParameters(
            command=str(BIN / "zodex-gateway"), args=["stdio", *args], env=self.env, cwd=str(self.root)
        )
        before = {p.pid for p in psutil.Process().children()}
        async with Client(params, read_timeout_seconds=300) as client:
            await trivial(client, 20, self.root / "w0")
            if not args:
                self.gateway = next(p for p in psutil.Process().children() if p.pid not in before)
            yield client

    def cpu(self) -> tuple[float, float]:
        """CPU seconds used so far by the stdio gateway and by its workers."""
        t = self.gateway.cpu_times()
        workers = 0.0
        # Workers are forked from the gateway's template: its grandchildren.
        for child in self.gateway.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                workers += c.user + c.system
        return t.user + t.system, workers

    @contextlib.asynccontextmanager
    async def local(self) -> AsyncIterator[tuple[str, dict[str, str]]]:
        zodex = str(BIN / "zodex")
        subprocess.run(
            [zodex, "local", "start", str(self.root)], env=self.env, check=True, capture_output=True
        )
        try:
            discovery = json.loads((self.root / "state/zodex/local/runtime/discovery.json").read_text())
            token = Path(discovery["mcp"]["token_path"]).read_text().strip()
            self.daemon = psutil.Process(discovery["pid"])
            yield discovery["mcp"]["url"], {"X-Zodex-Local-Token": token}
        finally:
            subprocess.run([zodex, "local", "stop"], env=self.env, check=True, capture_output=True)


Block = Callable[[Variant], Awaitable[float]]


async def rounds(variants: list[Variant], count: int, block: Block, label: str) -> dict[str, list[float]]:
    """``block`` returns one figure per variant per round; order alternates between rounds."""
    results: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(count):
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order:
            results[v.name].append(await block(v))
        print(
            f"  {label} round {r + 1}: " + ", ".join(f"{k} {vals[-1]:.3f}" for k, vals in results.items()),
            flush=True,
        )
    return results


def summary(label: str, results: dict[str, list[float]]) -> list[str]:
    lines = []
    for name, values in results.items():
        lines.append(
            f"{label:<34} {name:<5} median {statistics.median(values):.3f}  min {min(values):.3f}  max {max(values):.3f}"
        )
    names = list(results)
    if len(names) == 2:
        paired = [b / a for a, b in zip(results[names[0]], results[names[1]], strict=True)]
        lines.append(f"{label:<34} {names[1]}/{names[0]} median {statistics.median(paired):.3f}  "
                     f"min {min(paired):.3f}  max {max(paired):.3f}")  # fmt: skip
    return lines


async def run(args: argparse.Namespace) -> None:
    top = Path(tempfile.mkdtemp(prefix="zxab"))
    variants = [Variant("base", args.base, top / "base"), Variant("head", HEAD, top / "head")]
    n, out = args.n, []
    bare_pty_run("true")
    try:
        async with contextlib.AsyncExitStack() as stack:
            if "stdio" in args.figures or "loaded" in args.figures:
                clients = {v.name: await stack.enter_async_context(v.stdio()) for v in variants}

                cpu: dict[str, list[tuple[float, float]]] = {v.name: [] for v in variants}

                async def stdio_block(v: Variant) -> float:
                    f50 = floor_p50(n)
                    g0, w0 = v.cpu()
                    times = await trivial(clients[v.name], n, v.root / "w0")
                    g1, w1 = v.cpu()
                    cpu[v.name].append(((g1 - g0) / n * 1000, (w1 - w0) / n * 1000))
                    return percentile(times, 50) / f50

                if "stdio" in args.figures:
                    out += summary(
                        "stdio trivial p50 / floor", await rounds(variants, args.rounds, stdio_block, "stdio")
                    )
                    out += summary(
                        "gateway CPU ms per trivial call", {k: [g for g, _ in c] for k, c in cpu.items()}
                    )
                    out += summary(
                        "worker CPU ms per trivial call", {k: [w for _, w in c] for k, c in cpu.items()}
                    )
            if "http" in args.figures:
                http_clients = {}
                fresh_clients = {}
                for v in variants:
                    url, headers = await stack.enter_async_context(v.local())
                    http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=300))
                    http_clients[v.name] = await stack.enter_async_context(
                        Client(streamable_http_client(url, http_client=http))
                    )
                    once = await stack.enter_async_context(
                        httpx2.AsyncClient(
                            headers=headers, timeout=300, limits=httpx2.Limits(max_keepalive_connections=0)
                        )
                    )
                    fresh_clients[v.name] = await stack.enter_async_context(
                        Client(streamable_http_client(url, http_client=once))
                    )
                    await trivial(http_clients[v.name], 20, v.root / "w0")
                    await trivial(fresh_clients[v.name], 20, v.root / "w0")

                daemon_cpu: dict[str, list[float]] = {v.name: [] for v in variants}

                def used(v: Variant) -> float:
                    t = v.daemon.cpu_times()
                    return float(t.user + t.system)

                async def http_block(v: Variant) -> float:
                    f50 = floor_p50(n)
                    before = used(v)
                    times = await trivial(http_clients[v.name], n, v.root / "w0")
                    daemon_cpu[v.name].append((used(v) - before) / n * 1000)
                    return percentile(times, 50) / f50

                async def fresh_block(v: Variant) -> float:
                    f50 = floor_p50(n)
                    return percentile(await trivial(fresh_clients[v.name], n, v.root / "w0"), 50) / f50

                out += summary(
                    "http keep-alive trivial p50 / floor",
                    await rounds(variants, args.rounds, http_block, "http"),
                )
                out += summary("Local gateway CPU ms per HTTP call", daemon_cpu)
                out += summary(
                    "http fresh-conn trivial p50 / floor",
                    await rounds(variants, args.rounds, fresh_block, "fresh"),
                )
            if "seq" in args.figures:
                off = {v.name: await stack.enter_async_context(v.stdio("--no-history")) for v in variants}
                on = {v.name: await stack.enter_async_context(v.stdio()) for v in variants}

                async def seq_block(v: Variant) -> float:
                    t_on, t_off = [], []
                    for _ in range(2):
                        t_on.append(await seq_time(on[v.name], v.root / "w1"))
                        t_off.append(await seq_time(off[v.name], v.root / "w2"))
                    return min(t_off) / min(t_on)

                out += summary(
                    "seq throughput history on/off", await rounds(variants, args.rounds, seq_block, "seq")
                )
            if "loaded" in args.figures:
                streamer = (
                    f"{sys.executable} -u -c 'import time, itertools\n"
                    'for i in itertools.count(): print("stream line", i, flush=True); time.sleep(0.001)\''
                )

                async def loaded_block(v: Variant) -> float:
                    client = clients[v.name]
                    handles = []
                    for i in range(16):
                        r = await call(
                            client,
                            "exec_command",
                            cmd=streamer,
                            workdir=str(v.root / f"w{i % 4}"),
                            yield_time_ms=50,
                        )
                        handles.append(r["session_handle"])
                    await asyncio.sleep(0.5)
                    times = await trivial(client, max(n, 1000) if args.n >= 200 else n, v.root / "w0")
                    for h in handles:
                        await call(client, "write_stdin", session_handle=h, kill_process=True)
                    return percentile(times, 99) * 1000

                out += summary(
                    "trivial p99 ms, 16 streams", await rounds(variants, args.rounds, loaded_block, "loaded")
                )
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print(
        f"A/B: base = {args.base}, head = {HEAD}; {args.rounds} rounds, {n} calls per block, {os.cpu_count()} cores"
    )
    print("\n".join(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the other tree (its code is run through PYTHONPATH)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--n", type=int, default=200, help="calls per block (p99 blocks: at least 1000)")
    parser.add_argument("--figures", default="stdio,http,seq,loaded", help="comma-separated")
    asyncio.run(run(parser.parse_args()))
