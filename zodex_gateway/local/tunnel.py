"""An optional tunnel client (any command line: cloudflared, ngrok, OpenAI's Secure MCP
Tunnel client…) started with the runtime and ended with it.

It runs as ``$SHELL -c <tunnel.command>`` in its own session, with the MCP endpoint in its
environment: ``ZODEX_MCP_URL``, ``ZODEX_MCP_TOKEN``, ``ZODEX_MCP_TOKEN_FILE`` and, when
configured, ``ZODEX_TUNNEL_ID``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from zodex_worker import proctree

STOP_GRACE_S = 3.0


def start_tunnel(
    command: str, *, shell: str, url: str, token: str, token_file: Path, tunnel_id: str | None, log_file: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ZODEX_MCP_URL": url,
        "ZODEX_MCP_TOKEN": token,
        "ZODEX_MCP_TOKEN_FILE": str(token_file),
    }
    if tunnel_id:
        env["ZODEX_TUNNEL_ID"] = tunnel_id
    with open(log_file, "ab") as log:
        return subprocess.Popen(
            [shell, "-c", command],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its whole group is ended with the runtime
        )


def stop_tunnel(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def kill_tunnel_group(pid: int, start: int | None) -> None:
    """After a crash: end a tunnel's group if its leader is still the process we started."""
    info = proctree.read_proc(pid)
    if info is None or info.start != start:
        return
    proctree.signal_group(pid, signal.SIGKILL)
