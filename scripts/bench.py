#!/usr/bin/env python3
"""Zodex benchmark, through the public MCP tools only, against floors measured in the same run.

    python scripts/bench.py [--quick] [--fleet-only | --waits-only | --workers-only | --screens-only | --trivial-only]

Prints each figure next to its floor and the ratio, so results compare across machines:

- trivial ``exec_command`` (``true``) end to end through a real MCP stdio client, p50/p90,
  against spawning the same shell command on a bare PTY from Python;
- beside it, the same call as an outside harness sees it (``--trivial-only`` runs just these,
  with the CPU time a call costs the client, the gateway and the worker): a fresh SDK client
  per run, each a new process starting a new stdio gateway, the first 5 calls of each run
  left out (``scripts/bench_outside.py``);
- throughput of ``seq 1 1000000`` through exec + polls to the end, against reading the same
  command's PTY directly;
- p50/p99 of a trivial call while 16 sessions in 4 workdirs stream output (1,000 calls, or
  the sample count with ``--quick``);
- RSS of the gateway, of an idle worker, and of a worker after one session printed 100 MB;
- ``apply_patch`` of 200 chunks over a 20,000-line file, end to end;
- ``wait_for`` (``--waits-only`` runs just this): from a server writing ``ready`` to the
  ``exec_command`` waiting for it returning, against a reader of a bare PTY seeing the same
  line; and ``seq 1 1000000`` run to the end with a ``wait_for`` that never matches on every
  call against none (medians of alternating runs);
- the throughput above with history on against a gateway started with ``--no-history``: the
  medians of 6 runs each and the lowest ratio of a block, in 6 alternating blocks of one run
  (each block after ``sync`` and one run not counted), so that history's writeback falls on
  its own runs;
- the first call in a fresh workdir (p50 of 24) against warm trivial calls made between
  them (3 after each), and the PSS
  (``/proc/<pid>/smaps_rollup``, summed over the workers and the worker template) of each
  further idle workdir with 1, 10, 50 and 100 workdirs; both with workers forked from the
  template against workers started as new processes (``ZODEX_WORKER_TEMPLATE=off``); and
  as root on a kernel with KSM, the same at 100 workdirs once KSM has scanned them three
  times (it is turned on for that, scanning 10,000 pages a round, and put back as it was);
- 500 live idle workdirs on one gateway (50 with ``--quick``, ``scripts/bench_density.py``):
  the Pss of gateway, template and workers against 4 GiB, and a trivial call's p99 among
  them against a lone gateway's with one workdir, in alternating blocks;
- screens (``--screens-only`` runs just this): the worker's CPU for the output of
  ``seq 1 3000000`` with the session's terminal model against without it (in this process,
  as the wait_for row), ``seq 1 3000000`` run to the end through the tools, and a
  ``write_stdin`` whose result carries a full 50-row screen against one with plain output
  (medians of alternating calls);
- on a Local runtime (``zodex local start``, MCP over HTTP): trivial exec p50 and the
  throughput with a viewer subscribed to ``/v1/events`` (output included) against none, and
  the trivial exec p50 with a fresh TCP connection per call;
- the fleet (root only, else skipped with the reason; ``--fleet-only`` runs just this):
  four ``zodex host serve`` in network namespaces behind a ``zodex gateway serve``, with
  ``scripts/fleet_harness.py``. Trivial exec through the gateway and a host over
  ``tcp://`` + CURVE against a ``zodex sprite serve`` on this machine (workers over
  ``ipc://``), both MCP over HTTP with the same accounts and privilege model; p99 of a
  trivial call while the 16 streams are spread over 4 hosts against all on one; CPU time
  per trivial call of the gateway (what sets how many replicas), the host and Sprite.

Each latency phase starts after ``sync``: what earlier phases wrote (the history of a
million lines is tens of MB) is written back first, so the kernel's writeback threads do not
share the two cores with it.

Benchmarks are not tests: nothing here asserts; targets are printed beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import psutil
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

SHELL = os.environ.get("SHELL") or "/bin/sh"
GATEWAY = str(Path(sys.executable).parent / "zodex-gateway")
Row = tuple[str, str, str, str, str]  # figure, zodex, floor (or baseline), ratio, target


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# ---- floors ----------------------------------------------------------------------------


def spawn_on_pty(cmd: str, cwd: Path | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """``$SHELL -c cmd`` on a fresh PTY: the process and the PTY's master."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [SHELL, "-c", cmd],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        close_fds=True,
        cwd=cwd,
    )
    os.close(slave)
    return proc, master


def bare_pty_run(cmd: str) -> int:
    """Spawn ``$SHELL -c cmd`` on a fresh PTY, read until it is drained, reap it; bytes read."""
    import termios

    proc, master = spawn_on_pty(cmd)
    attrs = termios.tcgetattr(master)
    del attrs
    total = 0
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        total += len(chunk)
    proc.wait()
    os.close(master)
    return total


def floor_trivial(n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        bare_pty_run("true")
        times.append(time.perf_counter() - started)
    return times


def settle() -> None:
    """Write back what earlier phases left dirty (history of a million lines is tens of MB)
    before a latency phase, so the kernel's writeback threads do not compete with it for the
    two cores: each phase starts on a quiet machine, as the figures claim."""
    os.sync()


def floor_throughput() -> tuple[float, int]:
    started = time.perf_counter()
    size = bare_pty_run("seq 1 1000000")
    return time.perf_counter() - started, size


# A server that becomes ready: it writes its CLOCK_MONOTONIC reading the moment before it
# writes "ready" to a file, so a reader in another process measures from that instant.
READY_SERVER = (
    "python3 -c 'import sys, time; time.sleep(0.2); t = time.monotonic(); "
    'sys.stdout.write("ready\\n"); sys.stdout.flush(); open("ready.t", "w").write(repr(t)); '
    "time.sleep(60)'"
)


SEQ_MB = sum(len(f"{i}\n") for i in range(1, 1_000_001)) / 1e6


def written_at(workdir: Path) -> float:
    """The server's reading of the clock, once its file is complete (it follows the line)."""
    marker = workdir / "ready.t"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return float(marker.read_text())
        time.sleep(0.001)
    raise RuntimeError("the server never wrote ready.t")


def floor_ready(workdir: Path) -> float:
    """Seconds from the server writing ``ready`` to a reader of its bare PTY seeing it."""
    proc, master = spawn_on_pty(READY_SERVER, workdir)
    seen = b""
    while b"ready" not in seen:
        seen += os.read(master, 65536)
    at = time.monotonic()
    written = written_at(workdir)
    proc.kill()
    proc.wait()
    os.close(master)
    (workdir / "ready.t").unlink()
    return at - written


# ---- through Zodex ---------------------------------------------------------------------


class Bench:
    def __init__(self, client: Client, root: Path) -> None:
        self.client = client
        self.root = root

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args)
        if result.is_error:
            raise RuntimeError(result.content[0].text)
        return dict(result.structured_content or {"text": result.content[0].text})

    async def exec(self, cmd: str, workdir: Path, **args: Any) -> dict[str, Any]:
        return await self.call("exec_command", cmd=cmd, workdir=str(workdir), **args)

    async def run_to_end(self, cmd: str, workdir: Path) -> dict[str, Any]:
        r = await self.exec(cmd, workdir, yield_time_ms=60000)
        while r["status"] == "running":
            r = await self.call("write_stdin", session_handle=r["session_handle"], yield_time_ms=60000)
        return r

    async def run_waiting(self, cmd: str, workdir: Path, wait_for: str | None) -> dict[str, Any]:
        """``cmd`` to its end, every call with ``wait_for`` when it is given."""
        given = {} if wait_for is None else {"wait_for": wait_for}
        r = await self.exec(cmd, workdir, yield_time_ms=30000, **given)
        while r["status"] == "running":
            r = await self.call(
                "write_stdin", session_handle=r["session_handle"], yield_time_ms=30000, **given
            )
        return r

    async def round_trips(self, workdir: Path, n: int) -> list[float]:
        """A call that waits for nothing: write_stdin answered from an ended session's tombstone."""
        r = await self.exec("sleep 60", workdir, yield_time_ms=50)
        await self.call("write_stdin", session_handle=r["session_handle"], kill_process=True)
        times = []
        for _ in range(n):
            started = time.perf_counter()
            await self.call("write_stdin", session_handle=r["session_handle"])
            times.append(time.perf_counter() - started)
        return times

    async def ready(self, workdir: Path) -> float:
        """Seconds from the server writing ``ready`` to exec_command with wait_for returning."""
        r = await self.exec(READY_SERVER, workdir, wait_for="^ready$", yield_time_ms=30000)
        at = time.monotonic()
        assert r["wait"] == "matched", r
        written = written_at(workdir)
        await self.call("write_stdin", session_handle=r["session_handle"], kill_process=True)
        (workdir / "ready.t").unlink()
        return at - written

    async def trivial(self, n: int, workdir: Path) -> list[float]:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            await self.exec("true", workdir)
            times.append(time.perf_counter() - started)
        return times


def worker_pid(state: Path, workdir: Path) -> int:
    from zodex_protocol.handles import worker_id_for
    from zodex_protocol.layout import WorkerRecord

    wid = worker_id_for(os.path.realpath(workdir))
    for record_file in state.glob(f"run/zodex/*/w/{wid}.json"):
        record = WorkerRecord.read(record_file)
        if record is not None:
            return record.pid
    raise RuntimeError(f"no worker for {workdir}")


def make_patch(lines: int, chunks: int) -> tuple[str, str]:
    original = "".join(f"line {i} of the benchmark file\n" for i in range(lines))
    step = lines // chunks
    parts = ["*** Begin Patch", "*** Update File: big.txt"]
    for c in range(chunks):
        at = c * step + step // 2
        parts.append(f"@@ line {at - 2} of the benchmark file")
        parts.append(f" line {at - 1} of the benchmark file")
        parts.append(f"-line {at} of the benchmark file")
        parts.append(f"+line {at} was changed by the benchmark")
        parts.append(f" line {at + 1} of the benchmark file")
    parts.append("*** End Patch")
    return original, "\n".join(parts) + "\n"


class Viewer:
    """A subscriber to the observer's event stream that reads (and parses) every frame."""

    def __init__(self, base_url: str, bearer: str) -> None:
        self.events = 0
        self._url = f"{base_url}/v1/events"
        self._headers = {"Authorization": f"Bearer {bearer}"}
        self._ready = asyncio.Event()

    async def run(self) -> None:
        async with (
            httpx2.AsyncClient(timeout=None) as http,
            http.stream("GET", self._url, headers=self._headers) as response,
        ):
            self._ready.set()
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    json.loads(line[5:])
                    self.events += 1

    async def start(self) -> asyncio.Task[None]:
        task = asyncio.create_task(self.run())
        await self._ready.wait()
        return task


async def local_viewer_rows(
    root: Path, env: dict[str, str], workdir: Path, n: int, f50: float, mbps: float
) -> list[tuple[str, str, str, str, str]]:
    """What a live viewer costs the model: the same calls with and without a subscriber."""
    zodex = str(Path(sys.executable).parent / "zodex")
    local_env = {**env, "XDG_CONFIG_HOME": str(root / "config"), "SHELL": SHELL}
    subprocess.run([zodex, "local", "start", str(root)], env=local_env, check=True, capture_output=True)
    try:
        discovery = json.loads((root / "state/zodex/local/runtime/discovery.json").read_text())
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        observer = discovery["observability"]
        bearer = Path(observer["bearer_token_path"]).read_text().strip()
        headers = {"X-Zodex-Local-Token": token}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=300) as http,
            Client(streamable_http_client(discovery["mcp"]["url"], http_client=http)) as client,
        ):
            bench = Bench(client, root)
            await bench.trivial(20, workdir)
            alone = await bench.trivial(n, workdir)
            fresh = await fresh_connection_trivial(discovery["mcp"]["url"], headers, root, workdir, n)
            alone_tp = min(await timed_runs(bench, workdir))
            viewer = Viewer(observer["base_url"], bearer)
            watching = await viewer.start()
            watched = await bench.trivial(n, workdir)
            watched_tp = min(await timed_runs(bench, workdir))
            watching.cancel()
        bridge_params = StdioServerParameters(
            command=zodex, args=["local", "connect"], env=local_env, cwd=str(root)
        )
        async with Client(bridge_params, read_timeout_seconds=300) as bridged_client:
            bridged = Bench(bridged_client, root)
            await bridged.trivial(20, workdir)
            through_bridge = await bridged.trivial(n, workdir)
        starts = bridge_first_answers(zodex, local_env, 10 if n < 100 else 30)
    finally:
        subprocess.run([zodex, "local", "stop"], env=local_env, check=True, capture_output=True)
    a50, w50, fresh50 = percentile(alone, 50), percentile(watched, 50), percentile(fresh, 50)
    b50 = percentile(through_bridge, 50)
    python50 = percentile(starts["python3 -c pass"], 50)
    bridge_rows = [
        (
            f"`zodex local connect` first answer, {era}",
            f"{percentile(times, 50) * 1000:.1f} ms",
            f"{python50 * 1000:.1f} ms",
            f"{percentile(times, 50) / python50:.2f}x",
            "≤ 3x of `python3 -c pass`",
        )
        for era, times in starts.items()
        if era != "python3 -c pass"
    ]
    return [
        *bridge_rows,
        (
            "Local trivial exec p50 through `zodex local connect`",
            f"{b50 * 1000:.2f} ms",
            f"{a50 * 1000:.2f} ms",
            f"{b50 / a50:.2f}x",
            "≤ 1.5x of Local over HTTP",
        ),
        (
            "Local trivial exec p50, no viewer",
            f"{a50 * 1000:.2f} ms",
            f"{f50 * 1000:.2f} ms",
            f"{a50 / f50:.2f}x",
            "≤ 4x (one keep-alive connection)",
        ),
        (
            "Local trivial exec p50, fresh connection per call",
            f"{fresh50 * 1000:.2f} ms",
            f"{f50 * 1000:.2f} ms",
            f"{fresh50 / f50:.2f}x",
            "",
        ),
        (
            "Local trivial exec p50, viewer watching",
            f"{w50 * 1000:.2f} ms",
            f"{f50 * 1000:.2f} ms",
            f"{w50 / f50:.2f}x",
            f"{w50 / a50:.2f}x of no viewer ({viewer.events} events read)",
        ),
        (
            "Local seq throughput, viewer vs none",
            f"{mbps / watched_tp:.1f} MB/s",
            f"{mbps / alone_tp:.1f} MB/s",
            f"{alone_tp / watched_tp:.2f}x",
            "",
        ),
    ]


def bridge_first_answers(zodex: str, env: dict[str, str], n: int) -> dict[str, list[float]]:
    """From spawning ``zodex local connect`` to its first answer (Local running), for each
    era's opening request, interleaved with spawning ``python3 -c pass`` to its exit (the
    same interpreter): the start a client waits for, against a bare Python start."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    openings = {
        "initialize (2025-11-25)": {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
        },
        "server/discover (2026-07-28)": {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
    }  # fmt: skip
    times: dict[str, list[float]] = {"python3 -c pass": [], **{era: [] for era in openings}}
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times["python3 -c pass"].append(time.perf_counter() - started)
        for era, opening in openings.items():
            started = time.perf_counter()
            bridge = subprocess.Popen(
                [zodex, "local", "connect"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
            )
            assert bridge.stdin is not None and bridge.stdout is not None
            bridge.stdin.write(json.dumps(opening).encode() + b"\n")
            bridge.stdin.flush()
            answer = json.loads(bridge.stdout.readline())
            times[era].append(time.perf_counter() - started)
            assert "result" in answer, answer
            bridge.stdin.close()
            bridge.wait()
    return times


async def fresh_connection_trivial(
    url: str, headers: dict[str, str], root: Path, workdir: Path, n: int
) -> list[float]:
    """Trivial calls, each over a TCP connection of its own (no keep-alive)."""
    once = httpx2.Limits(max_keepalive_connections=0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=300, limits=once) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        bench = Bench(client, root)
        await bench.trivial(10, workdir)
        return await bench.trivial(n, workdir)


async def seq_blocks_alternating(
    first: Bench, first_dir: Path, second: Bench, second_dir: Path, blocks: int, runs: int
) -> tuple[list[float], list[float]]:
    """``seq 1 1000000`` run to the end in blocks, alternating between the two: each block
    starts after ``sync`` and a run that is not counted, then ``runs`` back to back, so each
    counted run meets what its side's own earlier runs left to write back (history's pages
    are part of its cost) and nothing of the other side's. The wall times, per side."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(blocks):
        for bench, workdir, into in ((first, first_dir, times[0]), (second, second_dir, times[1])):
            settle()
            for counted in (False, *([True] * runs)):
                started = time.perf_counter()
                r = await bench.run_to_end("seq 1 1000000", workdir)
                if counted:
                    into.append(time.perf_counter() - started)
                assert r["output_lines"] == 1_000_000, r
    return times


async def timed_runs(bench: Bench, workdir: Path) -> list[float]:
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        await bench.run_to_end("seq 1 1000000", workdir)
        runs.append(time.perf_counter() - started)
    return runs


# ---- fleet: hosts in network namespaces behind a gateway --------------------------------

# The streaming load of the single-machine figures: one long-lived process printing a line
# every millisecond, 16 of them (16,000 lines/s), run by the hosts' agent accounts.
HOST_STREAMER = (
    "python3 -u -c 'import time, itertools\n"
    'for i in itertools.count(): print("stream line", i, flush=True); time.sleep(0.001)\''
)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads), from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU time each process spent over the calls measured, summed over blocks."""

    def __init__(self, **pids: int) -> None:
        self.pids = pids
        self.spent = dict.fromkeys(pids, 0.0)
        self.calls = dict.fromkeys(pids, 0)

    async def block(self, name: str, run: Any) -> list[float]:
        pid = self.pids[name]
        before = cpu_seconds(pid)
        times: list[float] = await run()
        self.spent[name] += cpu_seconds(pid) - before
        self.calls[name] += len(times)
        return times

    def per_call_ms(self, name: str) -> float:
        return self.spent[name] / self.calls[name] * 1000


@contextlib.asynccontextmanager
async def http_bench(url: str) -> Any:
    """A :class:`Bench` over MCP's streamable HTTP, one keep-alive connection."""
    async with (
        httpx2.AsyncClient(timeout=300) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield Bench(client, Path("/"))


async def streams_p99(
    benches: list[Bench], dirs: list[Path], probe: Bench, probe_dir: Path, n: int
) -> list[float]:
    """Trivial calls on ``probe`` while 16 streams run, stream ``i`` on ``benches[i % k]`` in
    ``dirs[i % k]``; the streams are killed afterwards."""
    started = []
    try:
        for i in range(16):
            bench, workdir = benches[i % len(benches)], dirs[i % len(dirs)]
            r = await bench.exec(HOST_STREAMER, workdir, yield_time_ms=50)
            started.append((bench, r["session_handle"]))
        await asyncio.sleep(0.5)  # let the streams get going, as the single-machine figure does
        return await probe.trivial(n, probe_dir)
    finally:
        for bench, handle in started:
            await bench.call("write_stdin", session_handle=handle, kill_process=True)


async def fleet_rows(n: int) -> list[Row]:
    """Trivial exec through a gateway and a host in a network namespace (tcp:// + CURVE)
    against a Sprite service on this machine (ipc://), both MCP over HTTP with the same
    privilege model, interleaved in blocks; the p99 of a trivial call while 16 streams run
    spread over 4 hosts against all on one host; the CPU time per trivial call of the
    gateway, the host and the Sprite service."""
    import fleet_harness as fh

    from zodex_gateway.fleet import keys

    reason = fh.netns_unavailable()
    if reason is not None:
        print(f"fleet section skipped: {reason}", flush=True)
        return []
    stack = contextlib.ExitStack()
    try:
        python = stack.enter_context(fh.runnable_install()) / "bin" / "python3"
        base = Path(tempfile.mkdtemp(prefix="zodex-bench-fleet-", dir="/tmp"))
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        gateway_keys = base / "gateways"
        gateway_keys.mkdir(mode=0o755)
        keys.keygen(gateway_keys, "gw")  # the hosts read only gw.pub from here
        hosts = [stack.enter_context(fh.fleet_host(f"bench{i}", python, gateway_keys)) for i in range(4)]
        sprite = stack.enter_context(fh.sprite_service(python))
        gateway = fh.Gateway(base / "gateway.toml", python)
        fh.write_gateway_config(gateway.config, gateway_keys / "gw.key", hosts, gateway.port)
        stack.callback(gateway.stop)
        gateway.start()
        assert gateway.process is not None and sprite.process is not None
        for host in hosts:
            for i in range(4):
                (host.workspace / f"w{i}").mkdir(mode=0o750)
                os.chown(host.workspace / f"w{i}", host.agent.uid, host.agent.gid)
        return await _fleet_measure(n, fh, hosts, sprite, gateway)
    finally:
        # Cleanup is synchronous (no await): nothing interrupts it but a second Ctrl-C,
        # which is ignored until everything is removed.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            stack.close()
        finally:
            signal.signal(signal.SIGINT, previous)


async def _fleet_measure(n: int, fh: Any, hosts: list[Any], sprite: Any, gateway: Any) -> list[Row]:
    def host_url(host: Any) -> str:
        return f"{gateway.url}/h/{host.name}/mcp?key={fh.mcp_key(host)}"

    cpu = CpuMeter(gateway=gateway.process.pid, host=hosts[0].process.pid, sprite=sprite.process.pid)
    async with contextlib.AsyncExitStack() as clients:
        remote = [await clients.enter_async_context(http_bench(host_url(h))) for h in hosts]
        local = await clients.enter_async_context(http_bench(f"{sprite.url}/mcp?key={sprite.key}"))

        # 1. Trivial exec, remote host vs Sprite, alternating blocks so drift hits both.
        await remote[0].trivial(20, hosts[0].workspace)
        await local.trivial(20, sprite.workspace)
        remote_times: list[float] = []
        local_times: list[float] = []
        rounds = 4
        for _ in range(rounds):
            local_times += await cpu.block("sprite", lambda: local.trivial(n // rounds, sprite.workspace))
            remote_times += await cpu.block(
                "gateway",
                lambda: cpu.block("host", lambda: remote[0].trivial(n // rounds, hosts[0].workspace)),
            )

        # 2. p99 of a trivial call on host 0 while 16 streams run: spread over the 4 hosts
        # (4 on each, in one workdir) or all on host 0 (4 in each of 4 workdirs). Either way
        # the probed worker serves 4 streams; what differs is the host's other workers.
        spread: list[float] = []
        one: list[float] = []
        probe_dir = hosts[0].workspace / "w0"
        for _ in range(2):
            spread += await streams_p99(
                remote, [h.workspace / "w0" for h in hosts], remote[0], probe_dir, n // 2
            )
            one += await streams_p99(
                [remote[0]], [hosts[0].workspace / f"w{i}" for i in range(4)], remote[0], probe_dir, n // 2
            )

    r50, s50 = percentile(remote_times, 50), percentile(local_times, 50)
    r90, s90 = percentile(remote_times, 90), percentile(local_times, 90)
    p99_spread, p99_one = percentile(spread, 99), percentile(one, 99)
    gw_ms = cpu.per_call_ms("gateway")
    return [
        (
            "fleet trivial exec p50, host over tcp+CURVE vs Sprite over ipc (both MCP over HTTP)",
            f"{r50 * 1000:.2f} ms",
            f"{s50 * 1000:.2f} ms",
            f"{r50 / s50:.2f}x",
            "≤ 1.3x",
        ),
        (
            "fleet trivial exec p90, host vs Sprite",
            f"{r90 * 1000:.2f} ms",
            f"{s90 * 1000:.2f} ms",
            f"{r90 / s90:.2f}x",
            "",
        ),
        (
            "fleet trivial p99, 16 streams over 4 hosts vs on 1 host",
            f"{p99_spread * 1000:.2f} ms",
            f"{p99_one * 1000:.2f} ms",
            f"{p99_spread / p99_one:.2f}x",
            "≤ 1.2x",
        ),
        (
            "fleet trivial p50, 16 streams over 4 hosts vs on 1 host",
            f"{percentile(spread, 50) * 1000:.2f} ms",
            f"{percentile(one, 50) * 1000:.2f} ms",
            f"{percentile(spread, 50) / percentile(one, 50):.2f}x",
            "",
        ),
        (
            "fleet gateway CPU per trivial call",
            f"{gw_ms:.2f} ms",
            "",
            "",
            f"≈ {1000 / gw_ms:.0f} calls/s per core",
        ),
        ("fleet host CPU per trivial call", f"{cpu.per_call_ms('host'):.2f} ms", "", "", ""),
        ("Sprite service CPU per trivial call", f"{cpu.per_call_ms('sprite'):.2f} ms", "", "", ""),
    ]


async def wait_rows(bench: Bench, workdir: Path, quick: bool) -> list[Row]:
    """What wait_for costs: its latency against the PTY's, and its share of throughput."""
    settle()
    samples = 10 if quick else 30
    floor = [floor_ready(workdir) for _ in range(samples)]
    waited = [await bench.ready(workdir) for _ in range(samples)]
    trips = await bench.round_trips(workdir, samples * 3)
    alone = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--worker-ready", str(samples), str(workdir)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    f50, w50, t50 = statistics.median(floor), statistics.median(waited), statistics.median(trips)
    rows: list[Row] = [
        (
            "`ready` to the wait_for call returning, p50",
            f"{w50 * 1000:.2f} ms",
            f"{f50 * 1000:.2f} ms",
            f"+{(w50 - f50) * 1000:.2f} ms",
            f"within 2 ms of the PTY (p90 {percentile(waited, 90) * 1000:.2f} ms)",
        ),
        (
            "the same wait at the worker's service alone (in process), p50",
            f"{statistics.median(alone) * 1000:.2f} ms",
            f"{f50 * 1000:.2f} ms",
            f"+{(statistics.median(alone) - f50) * 1000:.2f} ms",
            "",
        ),
        (
            "a whole call answered at once (write_stdin, tombstone), p50",
            f"{t50 * 1000:.2f} ms",
            "",
            "",
            "what the call's own round trip costs",
        ),
    ]
    rows += watch_cpu_rows()
    for pattern in ("BUILD (SUCCESSFUL|FAILED)", "(?i)error", "^ready$"):
        plain: list[float] = []
        watched: list[float] = []
        for _ in range(3 if quick else 6):
            for wait_for, into in ((None, plain), (pattern, watched)):
                started = time.perf_counter()
                r = await bench.run_waiting("seq 1 1000000", workdir, wait_for)
                into.append(time.perf_counter() - started)
                assert r["output_lines"] == 1_000_000 and r.get("wait", "exited") == "exited", r
        p, w = statistics.median(plain), statistics.median(watched)
        rows.append(
            (
                f"seq throughput, wait_for {pattern!r} vs none (medians)",
                f"{SEQ_MB / w:.1f} MB/s",
                f"{SEQ_MB / p:.1f} MB/s",
                f"{p / w:.2f}x",
                "≥ 0.95x",
            )
        )
    return rows


async def worker_ready(workdir: Path, n: int) -> list[float]:
    """The wait measured at the worker's service, in process: from ``ready`` written to
    ``WorkerService.exec`` returning (run in a process of its own: the worker's reaper
    takes SIGCHLD)."""
    from zodex_protocol.handles import worker_id_for
    from zodex_protocol.requests import ExecRequest, WriteRequest
    from zodex_worker.reaper import Reaper
    from zodex_worker.service import WorkerConfig, WorkerService

    real = os.path.realpath(workdir)
    config = WorkerConfig(worker_id_for(real), 1, real, workdir / "spill", [SHELL, "-c"])
    service = WorkerService(config, Reaper(asyncio.get_running_loop()), lambda _event: None)
    times = []
    for _ in range(n):
        args = {"cmd": READY_SERVER, "workdir": real, "wait_for": "^ready$", "yield_time_ms": 30000}
        r = await service.exec(ExecRequest.from_args(args, config.limits))
        at = time.monotonic()
        times.append(at - written_at(workdir))
        assert r.session_handle is not None and r.wait == "matched", r
        await service.write(
            WriteRequest.from_args({"session_handle": r.session_handle, "kill_process": True}, config.limits)
        )
        (workdir / "ready.t").unlink()
    await service.shutdown()
    return times


def watch_cpu_rows() -> list[Row]:
    """The worker's CPU for one session's output of ``seq 1 1000000`` (cleaning, counting,
    spilling), in this process, with wait_for's watch checked after every 64 KiB read
    against none: the matching's own cost, apart from the machine's other load."""
    from zodex_protocol.wait_pattern import WaitPattern
    from zodex_worker.output.stream import SessionOutput

    data = "".join(f"{i}\r\n" for i in range(1, 1_000_001)).encode()
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]

    def cpu(pattern: str | None) -> float:
        with tempfile.TemporaryDirectory() as spill:
            out = SessionOutput(spill_dir=Path(spill), spill_name="bench")
            if pattern is not None:
                out.watch(WaitPattern.compile(pattern))
            started = time.process_time()
            for chunk in chunks:
                out.feed(chunk)
                out.check_watch()
            out.take_delta()
            spent = time.process_time() - started
            out.close()
            return spent

    none = min(cpu(None) for _ in range(5))
    rows: list[Row] = []
    for pattern in ("BUILD (SUCCESSFUL|FAILED)", "(?i)error", "^ready$"):
        spent = min(cpu(pattern) for _ in range(5))
        rows.append(
            (
                f"worker output CPU of seq, watching {pattern!r} vs none",
                f"{spent * 1000:.1f} ms",
                f"{none * 1000:.1f} ms",
                f"{none / spent:.2f}x",
                "",
            )
        )
    return rows


def screen_cpu_rows() -> list[Row]:
    """The worker's CPU for one session's output of ``seq 1 3000000`` in 4 KiB reads (the
    PTY's usual, and the costliest per byte), with the terminal model fed every read
    (docs/output.md#screens: it stays idle for lines) against without it; and what building
    one full screen for a result costs."""
    from zodex_worker.output.screen import SessionScreen
    from zodex_worker.output.stream import SessionOutput

    data = "".join(f"{i}\r\n" for i in range(1, 3_000_001)).encode()
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]

    def cpu(with_screen: bool) -> float:
        with tempfile.TemporaryDirectory() as spill:
            out = SessionOutput(spill_dir=Path(spill), spill_name="bench")
            screen = SessionScreen(50, 200)
            started = time.process_time()
            for chunk in chunks:
                raw = out.feed(chunk)
                if with_screen:
                    screen.feed(raw)
            out.take_delta()
            screen.take()
            spent = time.process_time() - started
            out.close()
            return spent

    runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(5):
        for with_screen in (False, True):
            runs[with_screen].append(cpu(with_screen))
    on, off = min(runs[True]), min(runs[False])
    full = SessionScreen(50, 200)
    full.feed("\x1b[?1049h\x1b[H" + "".join(f"\x1b[{row};1H" + "x" * 200 for row in range(1, 51)))
    takes = []
    for _ in range(200):
        started = time.perf_counter()
        full.take()
        takes.append(time.perf_counter() - started)
    return [
        (
            "worker output CPU of seq 1 3000000, screen model vs none",
            f"{on * 1000:.0f} ms",
            f"{off * 1000:.0f} ms",
            f"{off / on:.3f}x",
            ">= 0.95x",
        ),
        ("a full 50x200 screen for a result, p50", f"{percentile(takes, 50) * 1e6:.0f} us", "", "", ""),
    ]


SCREEN_ECHO = (
    "printf '\\033[?1049h\\033[H'; for i in $(seq 1 49); do printf '%0200d\\r\\n' $i; done; stty -echo; cat"
)
PLAIN_ECHO = "stty -echo; cat"


async def screen_rows(bench: Bench, workdir: Path, quick: bool) -> list[Row]:
    """seq through the tools, and a write_stdin answered with a screen against a plain one:
    ``cat`` echoing a typed line, in the alternate screen filled with 49 rows of 200
    characters, against plain ``cat``; each call returns at the echo (wait_for)."""
    rows: list[Row] = []
    started = time.perf_counter()
    await bench.run_to_end("seq 1 3000000", workdir)
    seconds = time.perf_counter() - started
    size = sum(len(f"{i}\n") for i in range(1, 3_000_001))
    rows.append(("seq 1 3000000 through the tools", f"{size / seconds / 1e6:.1f} MB/s", "", "", ""))
    handles = {}
    for name, cmd in (("screen", SCREEN_ECHO), ("plain", PLAIN_ECHO)):
        r = await bench.exec(cmd, workdir, yield_time_ms=1000)
        handles[name] = r["session_handle"]
    times: dict[str, list[float]] = {"screen": [], "plain": []}
    for i in range(30 if quick else 200):
        for name, handle in handles.items():
            started = time.perf_counter()
            r = await bench.call("write_stdin", session_handle=handle, chars=f"k{i}\n", wait_for=f"k{i}$")
            times[name].append(time.perf_counter() - started)
            assert ("screen" in r) == (name == "screen"), r
    for handle in handles.values():
        await bench.call("write_stdin", session_handle=handle, kill_process=True)
    screen, plain = percentile(times["screen"], 50), percentile(times["plain"], 50)
    rows.append(
        (
            "write_stdin answered with a 50-row screen vs plain, p50",
            f"{screen * 1000:.2f} ms",
            f"{plain * 1000:.2f} ms",
            f"{plain / screen:.2f}x",
            "",
        )
    )
    return rows


async def on_stdio_gateway(measure: Callable[[Bench, Path], Awaitable[list[Row]]]) -> list[Row]:
    """``measure`` on a fresh stdio gateway of its own, warmed by 20 trivial calls."""
    root = Path(tempfile.mkdtemp(prefix="zxb"))
    try:
        (root / "run").mkdir(mode=0o700)
        workdir = root / "w"
        workdir.mkdir()
        env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "XDG_RUNTIME_DIR": str(root / "run")}
        params = StdioServerParameters(command=GATEWAY, args=["stdio"], env=env, cwd=str(root))
        async with Client(params, read_timeout_seconds=300) as client:
            bench = Bench(client, root)
            await bench.trivial(20, workdir)
            return await measure(bench, workdir)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def screens_only_rows(quick: bool) -> list[Row]:
    return screen_cpu_rows() + await on_stdio_gateway(
        lambda bench, workdir: screen_rows(bench, workdir, quick)
    )


async def waits_only_rows(quick: bool) -> list[Row]:
    return await on_stdio_gateway(lambda bench, workdir: wait_rows(bench, workdir, quick))


async def machine_rows(n: int, quick: bool) -> list[Row]:
    """The single-machine figures: stdio, Local over HTTP, against the bare-PTY floor."""
    root = Path(tempfile.mkdtemp(prefix="zxb"))
    try:
        return await _machine_rows(root, n, quick)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _machine_rows(root: Path, n: int, quick: bool) -> list[Row]:
    (root / "run").mkdir(mode=0o700)
    dirs = [root / f"w{i}" for i in range(4)]
    for d in dirs:
        d.mkdir()
    env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "XDG_RUNTIME_DIR": str(root / "run")}
    rows: list[Row] = []

    floor_trivial(10)  # warm the page cache and the shell
    floor_times = floor_trivial(n)
    floor_tp, tp_bytes = min(floor_throughput() for _ in range(3))

    params = StdioServerParameters(command=GATEWAY, args=["stdio"], env=env, cwd=str(root))
    async with Client(params, read_timeout_seconds=300) as client:
        bench = Bench(client, root)
        await bench.trivial(20, dirs[0])  # worker spawned, caches warm
        zodex_times = await bench.trivial(n, dirs[0])
        f50, f90 = percentile(floor_times, 50), percentile(floor_times, 90)
        z50, z90 = percentile(zodex_times, 50), percentile(zodex_times, 90)
        rows.append(
            (
                "trivial exec p50",
                f"{z50 * 1000:.2f} ms",
                f"{f50 * 1000:.2f} ms",
                f"{z50 / f50:.2f}x",
                "≤ 2x, < 10 ms",
            )
        )
        rows.append(
            ("trivial exec p90", f"{z90 * 1000:.2f} ms", f"{f90 * 1000:.2f} ms", f"{z90 / f90:.2f}x", "")
        )
        rows += outside_harness_rows(env, root, dirs[0], f50, z50, runs=3 if quick else 10)

        # History on against a gateway started with --no-history, in alternating runs so that
        # both meet the same machine: recording every byte must not slow the PTY.
        off_params = StdioServerParameters(
            command=GATEWAY, args=["stdio", "--no-history"], env=env, cwd=str(root)
        )
        async with Client(off_params, read_timeout_seconds=300) as off_client:
            off_bench = Bench(off_client, root)
            await off_bench.trivial(5, dirs[3])
            on_runs, off_runs = await seq_blocks_alternating(bench, dirs[1], off_bench, dirs[3], 6, 1)
        z_tp = min(on_runs)
        on_median, off_median = statistics.median(on_runs), statistics.median(off_runs)
        mbps = tp_bytes / 1e6
        rows.append((
            "seq 1 1000000 throughput",
            f"{mbps / z_tp:.1f} MB/s",
            f"{mbps / floor_tp:.1f} MB/s",
            f"{floor_tp / z_tp:.2f}x",
            "≥ 0.7x",
        ))  # fmt: skip
        lowest = min(off / on for on, off in zip(on_runs, off_runs, strict=True))
        history_row = (
            "seq throughput, history on vs off (medians of 6 blocks)",
            f"{mbps / on_median:.1f} MB/s",
            f"{mbps / off_median:.1f} MB/s",
            f"{off_median / on_median:.2f}x",
            f"≥ 0.95x in every block (lowest {lowest:.2f}x)",
        )

        # Each stream: one long-lived process printing a line every millisecond (no process
        # churn, so the load is output handling, not fork/exec).
        streamer = (
            f"{sys.executable} -u -c 'import time, itertools\n"
            'for i in itertools.count(): print("stream line", i, flush=True); time.sleep(0.001)\''
        )
        settle()
        streams = []
        for i in range(16):
            r = await bench.exec(streamer, dirs[i % 4], yield_time_ms=50)
            streams.append(r["session_handle"])
        await asyncio.sleep(0.5)  # let the streams get going
        loaded = await bench.trivial(n if quick else max(n, 1000), dirs[0])  # a p99 of at least 1,000 calls
        l50, l99 = percentile(loaded, 50), percentile(loaded, 99)
        rows.append(
            (
                "trivial exec p50, 16 streams",
                f"{l50 * 1000:.2f} ms",
                f"{f50 * 1000:.2f} ms",
                f"{l50 / f50:.2f}x",
                "",
            )
        )
        rows.append(("trivial exec p99, 16 streams", f"{l99 * 1000:.2f} ms", "", "", "≤ 50 ms"))
        for handle in streams:
            await bench.call("write_stdin", session_handle=handle, kill_process=True)

        gateway = next(
            p for p in psutil.Process().children(recursive=True) if "zodex-gateway" in " ".join(p.cmdline())
        )
        rows.append(("gateway RSS", f"{gateway.memory_info().rss / 2**20:.1f} MB", "", "", ""))
        idle_dir = root / "idle"
        idle_dir.mkdir()
        await bench.exec("true", idle_dir)
        idle = psutil.Process(worker_pid(root, idle_dir))
        idle_rss = idle.memory_info().rss
        rows.append(("idle worker RSS", f"{idle_rss / 2**20:.1f} MB", "", "", "≤ 40 MB"))
        big = await bench.run_to_end("head -c 100000000 /dev/zero | tr '\\0' 'y' | fold -w 100", idle_dir)
        assert big["output_chars"] > 100_000_000
        grown = idle.memory_info().rss - idle_rss
        rows.append(("worker RSS growth after 100 MB", f"{grown / 2**20:.1f} MB", "", "", "≤ 10 MB"))

        original, patch = make_patch(20_000, 200)
        patch_times = []
        for _ in range(5 if quick else 15):
            (dirs[2] / "big.txt").write_text(original)
            started = time.perf_counter()
            await bench.call("apply_patch", patch=patch, workdir=str(dirs[2]))
            patch_times.append(time.perf_counter() - started)
        p50 = statistics.median(patch_times)
        rows.append(
            (
                "apply_patch 200 chunks / 20k lines",
                f"{p50 * 1000:.1f} ms",
                f"{f50 * 1000:.2f} ms",
                f"{p50 / f50:.1f}x",
                "< 100 ms",
            )
        )
        rows += await wait_rows(bench, dirs[2], quick)

    rows.append(history_row)

    settle()
    rows += await local_viewer_rows(root, env, dirs[3], n, f50, mbps)
    return rows


# ---- the trivial call as an outside harness sees it --------------------------------------


def outside_harness_rows(
    env: dict[str, str],
    root: Path,
    workdir: Path,
    floor_p50: float,
    own_p50: float,
    runs: int,
    calls: int = 25,
) -> list[Row]:
    """A fresh SDK client (a new process starting a new stdio gateway) per run, the first
    calls of each left out (``scripts/bench_outside.py``), beside this script's own figure."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_outside

    settle()
    found = bench_outside.fresh_client_runs(GATEWAY, env, root, workdir, runs, calls)
    return bench_outside.outside_rows(found, floor_p50, own_p50)


def _commands_cpu(pid: int) -> float:
    """The CPU time of the children ``pid`` has reaped (a worker's commands): ``/proc/<pid>/stat``'s cutime and cstime."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def _cpu_here() -> tuple[float, float]:
    """This process's CPU time (all threads), and that of the children it has reaped."""
    spent = os.times()
    return spent.user + spent.system, spent.children_user + spent.children_system


async def trivial_rows(runs: int, calls: int) -> list[Row]:
    """Only the trivial call: the floor, this script's own figure and the outside one, and
    the CPU time a call costs each process on its path (the client is this process)."""
    floor_trivial(10)
    started = _cpu_here()
    f50 = percentile(floor_trivial(200), 50)
    floor_cpu = [(b - a) / 200 * 1000 for a, b in zip(started, _cpu_here(), strict=True)]

    async def measure(bench: Bench, workdir: Path) -> list[Row]:
        root = bench.root
        gateway = next(p for p in psutil.Process().children() if "zodex-gateway" in " ".join(p.cmdline()))
        worker = worker_pid(root, workdir)
        before = (_cpu_here()[0], cpu_seconds(gateway.pid), cpu_seconds(worker), _commands_cpu(worker))
        z50 = percentile(await bench.trivial(200, workdir), 50)
        after = (_cpu_here()[0], cpu_seconds(gateway.pid), cpu_seconds(worker), _commands_cpu(worker))
        spent = [(b - a) / 200 * 1000 for a, b in zip(before, after, strict=True)]
        own = (
            "trivial exec p50",
            f"{z50 * 1000:.2f} ms",
            f"{f50 * 1000:.2f} ms",
            f"{z50 / f50:.2f}x",
            "≤ 2x",
        )
        cpu = (
            "CPU per trivial call: client / gateway / worker (its command)",
            " / ".join(f"{ms:.2f}" for ms in spent[:3]) + f" ms ({spent[3]:.2f} ms)",
            f"{floor_cpu[0]:.2f} ms ({floor_cpu[1]:.2f} ms)",
            f"{sum(spent) / sum(floor_cpu):.2f}x",
            "all of it, commands included, over the floor's",
        )
        env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "XDG_RUNTIME_DIR": str(root / "run")}
        return [own, cpu, *outside_harness_rows(env, root, workdir, f50, z50, runs, calls)]

    return await on_stdio_gateway(measure)


# ---- worker starts and density ---------------------------------------------------------


def pss_kib(pid: int) -> int:
    """A process's proportional set size: its shared pages divided among their sharers."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Pss in /proc/{pid}/smaps_rollup")


def runtime_pss_kib(gateway: psutil.Process, root: Path, workdirs: list[Path]) -> int:
    """Pss summed over the workers of ``workdirs`` and the gateway's worker template, if any
    (the template's pages are what its workers share, so they count)."""
    templates = []
    for child in gateway.children():
        with contextlib.suppress(psutil.NoSuchProcess):  # a zombie (psutil's subclass) too
            if "zodex_worker.template" in " ".join(child.cmdline()):
                templates.append(child.pid)
    return sum(pss_kib(pid) for pid in [*templates, *(worker_pid(root, d) for d in workdirs)])


def many_workdirs_env(root: Path, workdirs: int) -> dict[str, str]:
    """The environment of a stdio gateway kept under ``root`` that forks its workers from its
    template and keeps ``workdirs`` of them idle (its idle cap raised above that)."""
    (root / "run").mkdir(mode=0o700)
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_RUNTIME_DIR": str(root / "run"),
        "ZODEX_LIMITS": json.dumps({"max_idle_workers": workdirs + 8}),
    }
    env.pop("ZODEX_WORKER_TEMPLATE", None)
    return env


KSM = Path("/sys/kernel/mm/ksm")


@contextlib.contextmanager
def ksm_running(pages_to_scan: int = 10_000) -> Iterator[str | None]:
    """KSM running for the block, scanning fast, then as it was; or why it cannot be (and
    nothing changed): not root, or a kernel without KSM."""
    if os.geteuid() != 0:
        yield "KSM needs root"
        return
    if not (KSM / "run").exists():
        yield "this kernel has no KSM"
        return
    saved = {name: (KSM / name).read_text() for name in ("pages_to_scan", "run")}
    try:
        (KSM / "pages_to_scan").write_text(str(pages_to_scan))
        (KSM / "run").write_text("1")
        yield None
    finally:
        for name, value in saved.items():
            (KSM / name).write_text(value)


async def ksm_scanned(rounds: int = 3) -> None:
    """Until KSM has scanned every marked page ``rounds`` more times (a page is merged on
    the second scan that finds it unchanged). The kernel offers nothing to wait on."""
    start = int((KSM / "full_scans").read_text())
    while int((KSM / "full_scans").read_text()) < start + rounds:
        await asyncio.sleep(0.2)


async def worker_start_rows(quick: bool) -> list[Row]:
    """The first call in a fresh workdir and the memory of each further idle workdir, with
    workers forked from the template against workers started as new processes
    (``ZODEX_WORKER_TEMPLATE=off``), both in this run; then 500 live workdirs on one host
    (``scripts/bench_density.py``)."""
    from bench_density import density_rows  # it imports this module's helpers

    with tempfile.TemporaryDirectory(prefix="zxw", ignore_cleanup_errors=True) as root:
        rows = await _worker_start_rows(Path(root), quick)
    settle()
    return rows + await density_rows(50 if quick else 500, 100 if quick else 400)


async def _worker_start_rows(root: Path, quick: bool) -> list[Row]:
    (root / "run").mkdir(mode=0o700)
    counts = [1, 10] if quick else [1, 10, 50, 100]
    base = {
        **os.environ,
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_RUNTIME_DIR": str(root / "run"),
    }
    fresh_n = 10 if quick else 24
    # Room for every worker of the run (warm, fresh, idle): the cap would retire some.
    base["ZODEX_LIMITS"] = json.dumps({"max_idle_workers": 1 + fresh_n + max(counts) + 10})
    firsts: dict[str, list[float]] = {"on": [], "off": []}
    warm: dict[str, list[float]] = {}
    pss: dict[str, dict[int, int]] = {"on": {}, "off": {}}
    merged: tuple[int, int] | str  # the on gateway's 1 and all idle workdirs with KSM, or why not
    async with contextlib.AsyncExitStack() as stack:
        benches: dict[str, tuple[Bench, psutil.Process, Path]] = {}
        for mode in ("on", "off"):
            mode_root = root / mode
            mode_root.mkdir()
            env = {**base, "ZODEX_WORKER_TEMPLATE": mode}
            params = StdioServerParameters(
                command=GATEWAY, args=["stdio", "--no-history"], env=env, cwd=str(root)
            )
            client = await stack.enter_async_context(Client(params, read_timeout_seconds=300))
            bench = Bench(client, root)
            (mode_root / "warm").mkdir()
            await bench.trivial(20, mode_root / "warm")  # the template (if any) started, caches warm
            warm[mode] = []
            gateway = next(
                p
                for p in psutil.Process().children(recursive=True)
                if "zodex-gateway" in " ".join(p.cmdline())
                and p.environ().get("ZODEX_WORKER_TEMPLATE") == mode
            )
            benches[mode] = (bench, gateway, mode_root)
        settle()
        for i in range(fresh_n):  # alternating, so both meet the same machine
            for mode, (bench, _gateway, mode_root) in benches.items():
                fresh = mode_root / f"fresh{i}"
                fresh.mkdir()
                started = time.perf_counter()
                await bench.exec("true", fresh)
                firsts[mode].append(time.perf_counter() - started)
                # Warm calls at the same moment: the ratio then holds on a busy machine too.
                warm[mode] += await bench.trivial(3, mode_root / "warm")
        for mode, (bench, gateway, mode_root) in benches.items():
            idle: list[Path] = []
            for count in counts:
                while len(idle) < count:
                    idle.append(mode_root / f"idle{len(idle)}")
                    idle[-1].mkdir()
                    await bench.exec("true", idle[-1])
                pss[mode][count] = runtime_pss_kib(gateway, root, idle)
            if mode == "on":
                with ksm_running() as why_not:
                    if why_not is None:
                        await ksm_scanned()
                        merged = (
                            runtime_pss_kib(gateway, root, idle[:1]),
                            runtime_pss_kib(gateway, root, idle),
                        )
                    else:
                        merged = why_not
    on50, off50 = percentile(firsts["on"], 50), percentile(firsts["off"], 50)
    warm50 = percentile(warm["on"], 50)
    rows: list[Row] = [
        (
            f"first call in a fresh workdir p50 ({fresh_n} workdirs)",
            f"{on50 * 1000:.1f} ms",
            f"{warm50 * 1000:.2f} ms warm, interleaved",
            f"{on50 / warm50:.2f}x",
            "≤ 30 ms, ≤ 3x a warm trivial call",
        ),
        (
            "first call in a fresh workdir p50, template vs new process",
            f"{on50 * 1000:.1f} ms",
            f"{off50 * 1000:.1f} ms",
            f"{on50 / off50:.2f}x",
            f"max {max(firsts['on']) * 1000:.0f} vs {max(firsts['off']) * 1000:.0f} ms",
        ),
    ]
    for count in counts[1:]:
        per = {mode: (pss[mode][count] - pss[mode][1]) / (count - 1) / 1024 for mode in pss}
        rows.append(
            (
                f"PSS per further idle workdir, 1 → {count} workdirs",
                f"{per['on']:.1f} MB",
                f"{per['off']:.1f} MB new process",
                f"{per['on'] / per['off']:.2f}x",
                f"≤ 5 MB (total {pss['on'][count] / 1024:.0f} vs {pss['off'][count] / 1024:.0f} MB)",
            )
        )
    last = counts[-1]
    if isinstance(merged, str):
        rows.append(
            (f"PSS per further idle workdir, {last} workdirs, KSM running", "skipped", merged, "", "")
        )
    else:
        # Both sums at the same moment: the first workdir's share is already the smaller one.
        per_merged = (merged[1] - merged[0]) / (last - 1) / 1024
        per_off = (pss["off"][last] - pss["off"][1]) / (last - 1) / 1024
        rows.append(
            (
                f"PSS per further idle workdir, {last} workdirs, KSM running",
                f"{per_merged:.1f} MB",
                f"{per_off:.1f} MB new process",
                f"{per_merged / per_off:.2f}x",
                f"≤ 5 MB (total {merged[1] / 1024:.0f} MB; without KSM {pss['on'][last] / 1024:.0f} MB)",
            )
        )
    return rows


async def main(
    quick: bool,
    fleet_only: bool,
    waits_only: bool = False,
    workers_only: bool = False,
    screens_only: bool = False,
) -> None:
    # SIGTERM and SIGHUP end the run as Ctrl-C does: the running task is cancelled at its
    # next await, so every finally below removes what it made.
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGHUP):
        asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
    n = 30 if quick else 200
    if waits_only:
        rows = await waits_only_rows(quick)
    elif workers_only:
        rows = await worker_start_rows(quick)
    elif screens_only:
        rows = await screens_only_rows(quick)
    else:
        rows = [] if fleet_only else await machine_rows(n, quick)
        if not fleet_only:
            settle()
            rows += await worker_start_rows(quick)
            settle()
            rows += await screens_only_rows(quick)
        settle()
        rows += await fleet_rows(n)
    print(
        f"zodex bench — {os.cpu_count()} cores, {n} samples, floor = bare PTY spawn of `$SHELL -c` from Python"
        " (fleet rows: the baseline named in the figure)"
    )
    widths = [
        max(len(r[i]) for r in [*rows, ("figure", "zodex", "floor", "ratio", "target")]) for i in range(5)
    ]
    for row in [("figure", "zodex", "floor", "ratio", "target"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(json.dumps({r[0]: {"zodex": r[1], "floor": r[2], "ratio": r[3]} for r in rows}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument(
        "--fleet-only", action="store_true", help="only the fleet figures (root: hosts in network namespaces)"
    )
    parser.add_argument(
        "--workers-only", action="store_true", help="only the worker start and density figures"
    )
    parser.add_argument("--waits-only", action="store_true", help="only the wait_for figures")
    parser.add_argument("--screens-only", action="store_true", help="only the screen figures")
    parser.add_argument(
        "--trivial-only",
        action="store_true",
        help="only the trivial call: its floor, this script's figure and an outside harness's",
    )
    parser.add_argument("--worker-ready", nargs=2, metavar=("N", "WORKDIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trivial_only:
        rows = asyncio.run(trivial_rows(3 if args.quick else 10, 25))
        print("\n".join("  ".join(row) for row in rows))
        sys.exit(0)
    if args.worker_ready:
        samples, workdir = args.worker_ready
        print(json.dumps(asyncio.run(worker_ready(Path(workdir), int(samples)))))
        sys.exit(0)
    try:
        asyncio.run(main(args.quick, args.fleet_only, args.waits_only, args.workers_only, args.screens_only))
    except (asyncio.CancelledError, KeyboardInterrupt):
        sys.exit("bench interrupted; what it had made is removed")
