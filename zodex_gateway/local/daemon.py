"""The Local runtime process: what ``zodex local start`` leaves running in the background.

It owns a runtime, serves MCP over HTTP on a loopback port with a token (kept across
starts as docs/modes.md#a-stable-address says), publishes ``discovery.json``, runs the
configured tunnel, stops itself when its TTL runs out, and on stop (SIGTERM from
``zodex local stop``, or the TTL) kills every command and worker, ends the tunnel and
removes what it published.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import logging.handlers
import os
import signal
import sys
import time

from zodex_gateway.agents.session_ids import BadSessionKey, load_or_create_session_ids
from zodex_gateway.config.settings import LocalConfig, config_path
from zodex_gateway.local.address import PortUnavailable, listen_mcp, mcp_token, token_refusal
from zodex_gateway.local.bearer import ensure_bearer, write_secret
from zodex_gateway.local.discovery import RUNTIME_ENV, Discovery, OwnedProcess, iso, write_owned
from zodex_gateway.local.front import LocalFront
from zodex_gateway.local.paths import LocalPaths
from zodex_gateway.local.tunnel import start_tunnel, stop_tunnel
from zodex_gateway.observer import file_bearer
from zodex_gateway.observer.views import API_SCHEMA_VERSION, API_VERSION
from zodex_gateway.redaction import SECRETS, RedactingFormatter, watch_secret_files
from zodex_gateway.serve.running import serve_until_stopped
from zodex_gateway.serve.transports import ObserverServing, http_transport
from zodex_gateway.web.listener_limits import ListenerLimits
from zodex_gateway.web.server import base_url, listen
from zodex_gateway.workers.runtime import Runtime, default_shell
from zodex_system import proctree
from zodex_system.private_dirs import UnsafeDirectory

log = logging.getLogger("zodex.local")

# Until local.toml is read; then its log.max-size and log.keep (_apply_log_config).
LOG_BYTES = 8 * 1024 * 1024
LOG_BACKUPS = 3


class _StderrFollowingHandler(logging.handlers.RotatingFileHandler):
    """Rotates the log and points fd 2 (which workers inherit) at the new file."""

    def doRollover(self) -> None:
        super().doRollover()
        if self.stream is not None:
            os.dup2(self.stream.fileno(), 2)


def _setup_logging(paths: LocalPaths) -> None:
    watch_secret_files(paths.secret_files)  # the log never holds the token or the bearer
    handler = _StderrFollowingHandler(paths.log_file, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(name)s %(levelname)s %(message)s", SECRETS))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("mcp").setLevel(logging.WARNING)  # per-request chatter
    if handler.stream is not None:
        os.dup2(handler.stream.fileno(), 2)
        os.dup2(handler.stream.fileno(), 1)
    # A fatal signal (SIGBUS when a history file is cut short under SQLite's mapping,
    # SIGSEGV) ends the process before any code of ours could log: faulthandler writes the
    # tracebacks to fd 2, which follows the log across rotations, and `status` reads them.
    faulthandler.enable(file=2, all_threads=True)


def _apply_log_config(config: LocalConfig) -> None:
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.handlers.RotatingFileHandler):
            handler.maxBytes = config.size_bytes("log.max-size")
            handler.backupCount = config.integer("log.keep")


def run(start_directory: str, ttl_seconds: float | None, ready_fd: int) -> int:
    paths = LocalPaths.from_env()
    paths.create()
    _setup_logging(paths)
    try:
        session_ids = load_or_create_session_ids(paths.session_key)  # kept across starts
    except (BadSessionKey, UnsafeDirectory) as exc:
        log.error("%s", exc)  # the last line of the log: `start` shows it
        return 1
    config = LocalConfig.load(config_path())
    _apply_log_config(config)
    runtime = Runtime.create(
        state_dir=paths.state, limits=config.limits(), use_cgroups=config.flag("session.cgroups")
    )
    os.environ[RUNTIME_ENV] = runtime.runtime_id
    try:
        token = mcp_token(paths, config.text("mcp.token"))
        ensure_bearer(paths.observer_bearer)
        steer = config.flag("observer.steer")
        if steer:
            write_secret(paths.observer_steer)  # a new one each start: no viewer keeps it
        else:
            paths.observer_steer.unlink(missing_ok=True)
        sock = listen_mcp(paths, config.optional_integer("mcp.port"), listen)
        observer_sock = listen("127.0.0.1", 0)
    except (PortUnavailable, UnsafeDirectory) as exc:  # a busy pinned port, an unsafe kept token
        runtime.release()
        log.error("%s", exc)  # the last line of the log: `start` shows it
        return 1
    except BaseException:
        runtime.release()  # nothing half-started: the caller reports the failure
        raise
    started = time.time()
    expires = started + ttl_seconds if ttl_seconds else None
    shell = default_shell()[0]
    tunnel: list[object] = []

    def published(url: str) -> None:
        Discovery(
            runtime_id=runtime.runtime_id,
            pid=os.getpid(),
            pid_start=proctree.start_time(os.getpid()),
            start_directory=start_directory,
            started_at=iso(started) or "",
            expires_at=iso(expires),
            mcp={"url": url, "token_path": str(paths.token)},
            runtime_dir=str(runtime.layout.root),
            observability={
                "api_version": API_VERSION,
                "schema_version": API_SCHEMA_VERSION,
                "base_url": observer_url,
                "bearer_token_path": str(paths.observer_bearer),
                "events_url": f"{observer_url}/v1/events",
                **({"steer_token_path": str(paths.observer_steer)} if steer else {}),
            },
        ).write(paths.discovery)
        owned = [OwnedProcess("runtime", os.getpid(), proctree.start_time(os.getpid()))]
        command = config.text("tunnel.command")
        if command:
            process = start_tunnel(
                command,
                shell=shell,
                url=url,
                token=token,
                token_file=paths.token,
                tunnel_id=config.text("tunnel.id"),
            )
            tunnel.append(process)
            owned.append(OwnedProcess("tunnel", process.pid, proctree.start_time(process.pid)))
            log.info("tunnel started (pid %d): %s", process.pid, command)
        write_owned(paths.owned, owned)
        log.info("runtime %s serving %s (start directory %s)", runtime.runtime_id, url, start_directory)
        os.write(ready_fd, f"READY {url}\n".encode())
        os.close(ready_fd)
        if expires is not None:
            _stop_at(expires)

    read_only_hint = config.flag("mcp.read-only-hint")
    observer_url = base_url(observer_sock)
    observer = ObserverServing(
        observer_sock,
        file_bearer(paths.observer_bearer),
        runtime.runtime_id,
        started,
        steer=file_bearer(paths.observer_steer) if steer else None,
    )
    transport = http_transport(
        sock,
        LocalFront.admitting(token, sock.getsockname()[0], refusal=token_refusal()),
        start_directory,
        published,
        read_only_hint=read_only_hint,
        observer=observer,
        limits=ListenerLimits.from_config(config),
        session_ids=session_ids,
    )
    try:
        asyncio.run(serve_until_stopped(runtime, transport))
    finally:
        for process in tunnel:
            stop_tunnel(process)  # type: ignore[arg-type]
        _unpublish(paths, runtime.runtime_id)
        log.info("runtime %s stopped", runtime.runtime_id)
    return 0


def _stop_at(expires: float) -> None:
    """The TTL is wall-clock: re-arm if the monotonic timer fired early (e.g. after a suspend)."""
    loop = asyncio.get_running_loop()

    def check() -> None:
        remaining = expires - time.time()
        if remaining > 0:
            loop.call_later(remaining, check)
        else:
            log.info("TTL reached; stopping")
            os.kill(os.getpid(), signal.SIGTERM)  # exactly the path `zodex local stop` takes

    loop.call_later(max(0.0, expires - time.time()), check)


def _unpublish(paths: LocalPaths, runtime_id: str) -> None:
    current = Discovery.read(paths.discovery)
    if current is not None and current.runtime_id == runtime_id:
        paths.discovery.unlink(missing_ok=True)
        paths.owned.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="zodex-local-runtime", description=__doc__)
    parser.add_argument("--start-directory", required=True)
    parser.add_argument("--ttl-seconds", type=float, default=None)
    parser.add_argument("--ready-fd", type=int, required=True)
    args = parser.parse_args(argv)
    sys.exit(run(args.start_directory, args.ttl_seconds, args.ready_fd))


if __name__ == "__main__":
    main()
