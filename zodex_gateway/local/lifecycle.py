"""``zodex local start | stop | status`` as typed functions; the CLI only prints and exits.

Light on imports: ``status``, ``stop`` and ``logs`` read files and signal processes, so
nothing here loads the server (MCP, Starlette, uvicorn) or, until a runtime's workers are
asked, ZeroMQ (tests/gateway/test_cli.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zodex_gateway.config.operator_command import zodex_command
from zodex_gateway.config.settings import ConfigError, LocalConfig, config_path
from zodex_gateway.local.address import PortUnavailable, check_pinned_port
from zodex_gateway.local.crash import crash_of
from zodex_gateway.local.discovery import RUNTIME_ENV, Discovery, read_owned
from zodex_gateway.local.paths import LocalPaths
from zodex_gateway.local.tunnel import kill_tunnel_group
from zodex_protocol.layout import RuntimeLayout, WorkerRecord
from zodex_system import proctree, runtime_cgroups

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class LocalError(Exception):
    """A refusal or failure with one clear line for the operator."""


@dataclass(frozen=True)
class StartResult:
    discovery: Discovery
    already_running: bool


def runtime_alive(discovery: Discovery) -> bool:
    return proctree.is_alive(discovery.pid, discovery.pid_start)


def active(paths: LocalPaths) -> Discovery | None:
    """The running runtime, if any (a discovery file whose process is gone does not count).
    A discovery file is trusted only in a directory that is safely the user's."""
    paths.verify()
    discovery = Discovery.read(paths.discovery)
    return discovery if discovery is not None and runtime_alive(discovery) else None


def start(paths: LocalPaths, start_directory: str, ttl_seconds: float | None) -> StartResult:
    running = active(paths)
    if running is not None:
        return StartResult(running, already_running=True)
    if not os.path.isabs(start_directory) or not os.path.isdir(start_directory):
        raise LocalError(f"start directory must be an existing absolute directory: {start_directory}")
    paths.create()  # after active(): every directory was verified before anything is made
    clean_up_after_crash(paths)
    _check_pinned_port()
    ready_r, ready_w = os.pipe()
    argv = [
        sys.executable, "-m", "zodex_gateway.local.daemon",
        "--start-directory", os.path.realpath(start_directory),
        "--ready-fd", str(ready_w),
    ]  # fmt: skip
    if ttl_seconds:
        argv += ["--ttl-seconds", str(ttl_seconds)]
    with open(paths.log_file, "ab") as log:
        daemon = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(ready_w,),
            start_new_session=True,  # detached from the terminal that ran `start`
            cwd=os.path.realpath(start_directory),
        )
    os.close(ready_w)
    try:
        line = _read_ready(ready_r)
    finally:
        os.close(ready_r)
    discovery = Discovery.read(paths.discovery)
    if not line.startswith("READY ") or discovery is None or discovery.pid != daemon.pid:
        _abandon(daemon, paths)
        raise LocalError(f"Zodex Local failed to start{_log_hint(paths)}")
    try:
        _check_answers_mcp(discovery)
    except LocalError as exc:
        _abandon(daemon, paths)
        raise LocalError(f"Zodex Local started but did not answer MCP ({exc}){_log_hint(paths)}") from exc
    # The runtime lives on its own: mark the Popen as settled so it never tries to reap it.
    daemon.returncode = 0
    return StartResult(discovery, already_running=False)


def _check_pinned_port() -> None:
    """A busy ``mcp.port`` is refused here, with nothing started (the runtime refuses it
    too, should it be taken meanwhile). A configuration that does not load is the
    runtime's to report, as every other start failure."""
    try:
        pinned = LocalConfig.load(config_path()).optional_integer("mcp.port")
    except ConfigError:
        return
    if pinned is not None:
        try:
            check_pinned_port(pinned)
        except PortUnavailable as exc:
            raise LocalError(str(exc)) from exc


def _read_ready(fd: int) -> str:
    """The daemon's first line on the ready pipe, or "" if it exits or times out first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return ""
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            return ""
        chunk = os.read(fd, 4096)
        if not chunk:
            break  # the daemon closed the pipe without saying READY: it failed
        data += chunk
    return data.decode(errors="replace").split("\n", 1)[0]


def _check_answers_mcp(discovery: Discovery) -> None:
    import httpx2  # only `start` talks HTTP

    token = Path(discovery.mcp["token_path"]).read_text().strip()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "zodex-local-start", "version": "1"},
        },
    }
    try:
        response = httpx2.post(
            discovery.mcp["url"],
            json=body,
            headers={"X-Zodex-Local-Token": token, "Accept": "application/json, text/event-stream"},
            timeout=10,
            trust_env=False,  # an HTTP(S)_PROXY of the environment must never see the token
        )
    except httpx2.HTTPError as exc:
        raise LocalError(str(exc)) from exc
    if response.status_code != 200 or "result" not in response.json():
        raise LocalError(f"HTTP {response.status_code}")


def _abandon(daemon: subprocess.Popen[bytes], paths: LocalPaths) -> None:
    if daemon.poll() is None:
        daemon.terminate()
        try:
            daemon.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    clean_up_after_crash(paths)


def _log_hint(paths: LocalPaths) -> str:
    tail = tail_lines(paths.log_file, 5)
    last = next((line for line in reversed(tail) if line.strip()), "")
    see = f"(see `{zodex_command('local', 'logs')}`)"
    return f": {last.strip()} {see}" if last else f" {see}"


def stop(paths: LocalPaths) -> bool:
    """Stop the runtime if one runs, and clean up after a crashed one. True if one was running."""
    paths.verify()  # the pids to signal are read from these directories
    discovery = Discovery.read(paths.discovery)
    was_running = discovery is not None and runtime_alive(discovery)
    if discovery is not None and was_running:
        info = proctree.read_proc(discovery.pid)
        if info is not None:
            proctree.signal_process(info, signal.SIGTERM)
            if not _wait_gone(discovery.pid, STOP_TIMEOUT_S):
                proctree.signal_process(info, signal.SIGKILL)
                _wait_gone(discovery.pid, 5.0)
    clean_up_after_crash(paths)
    return was_running


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait for a process that is not our child to exit: on a pidfd, not a timer."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return proctree.read_proc(pid) is None
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def clean_up_after_crash(paths: LocalPaths) -> None:
    """Kill whatever a dead runtime owned — tunnel, workers, commands — and unpublish it.

    Every pid is checked against the start time recorded for it, so a reused pid is never
    signalled. Commands are recognised by the runtime's cgroup (named in its runtime
    directory) and by the runtime id in their environment.
    """
    discovery = Discovery.read(paths.discovery)
    if discovery is not None and runtime_alive(discovery):
        return
    for owned in read_owned(paths.owned):
        if owned.kind == "tunnel":
            kill_tunnel_group(owned.pid, owned.start)
    if discovery is not None:
        layout = RuntimeLayout(Path(discovery.runtime_dir))
        for record_file in layout.workers_dir.glob("*.json") if layout.workers_dir.exists() else []:
            record = WorkerRecord.read(record_file)
            info = proctree.read_proc(record.pid) if record else None
            if record is not None and info is not None and info.start == record.pid_start:
                proctree.signal_process(info, signal.SIGKILL)
        # Runtime ids have one length, so this prefix names exactly this runtime.
        for leftover in proctree.processes_with_env(f"{RUNTIME_ENV}={discovery.runtime_id}"):
            proctree.signal_process(leftover, signal.SIGKILL)
        # Its session cgroups hold even commands that cleared their environment.
        runtime_cgroups.kill_runtime(layout.root)
        with contextlib.suppress(OSError):
            shutil.rmtree(layout.root)
    paths.discovery.unlink(missing_ok=True)
    paths.owned.unlink(missing_ok=True)


def status(paths: LocalPaths) -> dict[str, Any]:
    discovery = active(paths)
    if discovery is None:
        return _crashed(paths) or {"running": False, "active_process_count": 0}
    return {
        "running": True,
        "runtime_id": discovery.runtime_id,
        "pid": discovery.pid,
        "start_directory": discovery.start_directory,
        "started_at": discovery.started_at,
        "expires_at": discovery.expires_at,
        "mcp_url": discovery.mcp["url"],
        "token_path": discovery.mcp["token_path"],
        "observer_url": discovery.observability.get("base_url"),
        "active_process_count": active_process_count(discovery),
    }


def _crashed(paths: LocalPaths) -> dict[str, Any] | None:
    """A runtime still published whose process is gone died without stopping: what
    runtime.log says of why (until `stop` or the next `start` cleans up after it)."""
    discovery = Discovery.read(paths.discovery)
    if discovery is None or runtime_alive(discovery):
        return None
    crash = crash_of(discovery, paths.log_file)
    return {
        "running": False,
        "crashed": True,
        "runtime_id": discovery.runtime_id,
        "pid": discovery.pid,
        "started_at": discovery.started_at,
        "reason": crash.reason,
        "signal": crash.signal,
        "log": list(crash.log_lines),
        "active_process_count": 0,
    }


def active_process_count(discovery: Discovery) -> int:
    """Running command sessions, asked of each worker through the real request path."""
    from zodex_gateway.local.probe import count_running_sessions

    return count_running_sessions(RuntimeLayout(Path(discovery.runtime_dir)))


def tail_lines(path: Path, count: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return lines[-count:] if count > 0 else []


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2)
