"""An optional tunnel client (any command line: cloudflared, ngrok, OpenAI's Secure MCP
Tunnel client…) started with the runtime and ended with it.

It runs as ``$SHELL -c <tunnel.command>`` in its own session, with the MCP endpoint in its
environment: ``ZODEX_MCP_URL``, ``ZODEX_MCP_TOKEN``, ``ZODEX_MCP_TOKEN_FILE`` and, when
configured, ``ZODEX_TUNNEL_ID``. Its output is relayed line by line into the runtime's log,
whose lines are redacted: a tunnel that logs the requests it forwards would otherwise
write the token there (docs/security.md#redaction).
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO

from zodex_gateway.redaction import SECRETS, SecretRegistry
from zodex_system import proctree

log = logging.getLogger("zodex.tunnel")

STOP_GRACE_S = 3.0
LOG_LINE_BYTES = 64 * 1024  # a longer line is logged in pieces


def start_tunnel(
    command: str, *, shell: str, url: str, token: str, token_file: Path, tunnel_id: str | None
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ZODEX_MCP_URL": url,
        "ZODEX_MCP_TOKEN": token,
        "ZODEX_MCP_TOKEN_FILE": str(token_file),
    }
    if tunnel_id:
        env["ZODEX_TUNNEL_ID"] = tunnel_id
    process = subprocess.Popen(
        [shell, "-c", command],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its whole group is ended with the runtime
    )
    assert process.stdout is not None
    threading.Thread(target=_relay, args=(process.stdout,), name="tunnel-output", daemon=True).start()
    return process


def _relay(stream: IO[bytes], secrets: SecretRegistry = SECRETS) -> None:
    """Until the tunnel (and every process holding its output) is gone. A long line is
    logged in pieces, redacted as one stream before it is cut: a secret straddling a cut
    would be in neither piece whole, and so missed by the log's formatter."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    redactor = secrets.output_stream()
    with stream:
        while piece := stream.readline(LOG_LINE_BYTES):
            ended = piece.endswith(b"\n")
            text = redactor.feed(decoder.decode(piece.rstrip(b"\n")))
            if ended:
                text += redactor.feed(decoder.decode(b"", final=True)) + redactor.finish()
            if text or ended:
                log.info("%s", text)
        rest = redactor.feed(decoder.decode(b"", final=True)) + redactor.finish()
        if rest:
            log.info("%s", rest)


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
