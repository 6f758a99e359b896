"""The Local runtime's listeners under hostile clients (docs/modes.md#http-listeners): slow
clients from another account cannot exhaust its descriptors, and ``mcp.max-body`` bounds
a request body with a JSON-RPC 413."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.local import ZODEX, LocalEnv, connected, local_env
from tests.support.second_user import popen_as_second_user, second_user_python

pytestmark = pytest.mark.timeout(120)

SLOW_CONNECTIONS = 300
# Opens connections that each send one header line and then nothing; reports how many
# opened, then how many the server closed (it waits for all of them, at most 30 s).
SLOW_CLIENT = r"""
import selectors, socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
opened, failed = [], 0
for _ in range(count):
    try:
        conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        conn.setblocking(False)
        opened.append(conn)
    except OSError:
        failed += 1
print(f"opened {len(opened)} failed {failed}", flush=True)
selector = selectors.DefaultSelector()
for conn in opened:
    selector.register(conn, selectors.EVENT_READ)
closed, deadline = 0, time.monotonic() + 30
while closed < len(opened) and time.monotonic() < deadline:
    for key, _ in selector.select(timeout=0.5):
        try:
            data = key.fileobj.recv(4096)
        except OSError:
            data = b""
        if not data:
            selector.unregister(key.fileobj)
            closed += 1
print(f"closed {closed}", flush=True)
"""


def start_under_prlimit(local: LocalEnv, nofile: str) -> None:
    done = subprocess.run(
        ["prlimit", f"--nofile={nofile}", ZODEX, "local", "start"],
        env=local.env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=local.root,
    )
    assert done.returncode == 0, done.stderr + done.stdout


def open_files_limit(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line in /proc/<pid>/limits")


def slow_client(port: int) -> subprocess.Popen[str]:
    """The flood, from the second account when we can act as it (root), else from ours."""
    argv = ["-c", SLOW_CLIENT, str(port), str(SLOW_CONNECTIONS)]
    if os.geteuid() == 0:
        return popen_as_second_user([*second_user_python(), *argv], stdout=subprocess.PIPE, text=True)
    return subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
async def test_slow_clients_cannot_starve_mcp_of_descriptors() -> None:
    with local_env() as local:
        local.run("local", "config", "set", "http.header-timeout", "3s")
        start_under_prlimit(local, "200:4096")
        pid = local.discovery()["pid"]
        assert open_files_limit(pid) == (4096, 4096), "the soft limit was raised to the hard one"
        async with connected(local) as mcp:
            usual = await mcp.exec("ulimit -Sn", str(local.root))
        assert usual["output"].strip() == "200", "commands keep the limit the runtime started with"
        subprocess.run(["prlimit", f"--pid={pid}", "--nofile=256:256"], check=True, timeout=10)
        port = int(local.discovery()["mcp"]["url"].rsplit(":", 1)[1].split("/")[0])
        flood = slow_client(port)
        try:
            assert flood.stdout is not None
            opened = await asyncio.to_thread(flood.stdout.readline)
            assert opened.startswith("opened "), opened
            count = int(opened.split()[1])
            assert count > 256, f"the flood must outnumber the descriptors: {opened}"
            fresh = local.root / "fresh"  # a new workdir: a new worker needs descriptors too
            fresh.mkdir()
            async with asyncio.timeout(10), connected(local) as mcp:  # a real call, in time
                result = await mcp.exec("echo still-served", str(fresh))
            assert result["output"].strip() == "still-served"
            closed = await asyncio.wait_for(asyncio.to_thread(flood.stdout.readline), 40)
            assert closed.strip() == f"closed {count}", "every slow connection was closed"
        finally:
            if flood.poll() is None:
                flood.kill()
            flood.wait()
            if flood.stdout is not None:
                flood.stdout.close()


async def test_max_body_is_configurable_and_answered_with_a_json_rpc_413() -> None:
    with local_env() as local:
        local.run("local", "config", "set", "mcp.max-body", "1mb")
        local.run("local", "start")
        discovery: dict[str, Any] = local.discovery()
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        headers = {
            "X-Zodex-Local-Token": token,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        async with httpx2.AsyncClient(trust_env=False, timeout=30) as client:
            too_big = await client.post(
                discovery["mcp"]["url"], headers=headers, content=b" " * (1024**2 + 1)
            )
        assert too_big.status_code == 413
        assert too_big.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "request body exceeds mcp.max-body (1 MiB)"},
        }
        async with connected(local) as mcp:  # a body within the limit is served as ever
            assert (await mcp.exec("echo fine", str(local.root)))["output"].strip() == "fine"
