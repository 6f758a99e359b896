"""``zodex-gateway``: the MCP gateway, over stdio or streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click

from zodex_gateway.dispatcher import ZmqDispatcher
from zodex_gateway.http_app import GuardedMcpApp, load_or_create_token
from zodex_gateway.mcp_server import build_server
from zodex_gateway.runtime import Runtime
from zodex_gateway.supervisor import Supervisor
from zodex_protocol.limits import Limits

log = logging.getLogger("zodex.gateway")


def _limits_from_env() -> Limits:
    """``ZODEX_LIMITS`` (a JSON object of SPEC §9 overrides) — how tests shrink the clock."""
    raw = os.environ.get("ZODEX_LIMITS")
    return Limits.from_dict(json.loads(raw)) if raw else Limits()


def _open_runtime(runtime_dir: Path | None, state_dir: Path | None) -> Runtime:
    limits = _limits_from_env()
    if runtime_dir is not None:
        return Runtime.join(runtime_dir, state_dir=state_dir, limits=limits)
    return Runtime.create(state_dir=state_dir, limits=limits)


class StopSignal:
    """SIGTERM/SIGINT handling. A transport may install a hook that begins its own graceful
    exit (uvicorn's); the workers are stopped either way."""

    def __init__(self) -> None:
        self.hook: Callable[[], None] | None = None


GRACEFUL_TRANSPORT_S = 3.0


async def _serve(
    runtime: Runtime, serve: Callable[[Supervisor, StopSignal], Coroutine[Any, Any, None]]
) -> None:
    """Serve until the transport ends (stdin closed) or SIGTERM/SIGINT; then stop every
    worker — and with them every command — before exiting."""
    supervisor = Supervisor(runtime)
    loop = asyncio.get_running_loop()
    stop = StopSignal()
    signalled = asyncio.Event()

    def on_signal() -> None:
        if stop.hook is not None:
            stop.hook()
        signalled.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    serving = asyncio.create_task(serve(supervisor, stop))
    waiting = asyncio.create_task(signalled.wait())
    await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not serving.done() and stop.hook is not None:
        await asyncio.wait({serving}, timeout=GRACEFUL_TRANSPORT_S)
    try:
        await supervisor.shutdown()
    finally:
        runtime.release()
    if serving.done():
        if not serving.cancelled() and serving.exception() is not None:
            log.error("transport failed: %r", serving.exception())
        return
    # The stdio transport reads stdin in a worker thread that no cancellation can
    # interrupt; with the workers stopped and the runtime released, leave now.
    sys.stdout.flush()
    os._exit(0)


_common = [
    click.option(
        "--runtime-dir", type=click.Path(path_type=Path), help="Join this runtime instead of starting one."
    ),
    click.option(
        "--state-dir", type=click.Path(path_type=Path), help="Where spill files live (default: XDG state)."
    ),
    click.option("--start-directory", help="Directory named in the server instructions (default: cwd)."),
]


def common_options(f: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_common):
        f = option(f)
    return f


@click.group()
@click.version_option(package_name="zodex")
def cli() -> None:
    """Zodex MCP gateway: exec_command, write_stdin and apply_patch on this machine."""
    logging.basicConfig(level=logging.WARNING, format="zodex-gateway %(levelname)s %(message)s")


@cli.command()
@common_options
def stdio(runtime_dir: Path | None, state_dir: Path | None, start_directory: str | None) -> None:
    """Speak MCP on stdin/stdout (for clients that spawn their servers)."""
    from mcp.server.stdio import stdio_server

    runtime = _open_runtime(runtime_dir, state_dir)

    async def serve(supervisor: Supervisor, _stop: StopSignal) -> None:
        server = build_server(ZmqDispatcher(supervisor), start_directory=start_directory or os.getcwd())
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    asyncio.run(_serve(runtime, serve))


@cli.command()
@common_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, show_default=True, help="Port to listen on; 0 picks a free one.")
@click.option(
    "--token-file",
    required=True,
    type=click.Path(path_type=Path),
    help="File holding the access token (created with a fresh token, mode 0600, if missing).",
)
def http(
    runtime_dir: Path | None,
    state_dir: Path | None,
    start_directory: str | None,
    host: str,
    port: int,
    token_file: Path,
) -> None:
    """Speak stateless streamable HTTP on /mcp, guarded by a token and a Host check."""
    import uvicorn

    try:
        token = load_or_create_token(token_file)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from exc
    sock.listen(128)
    bound_port = sock.getsockname()[1]
    runtime = _open_runtime(runtime_dir, state_dir)

    async def serve(supervisor: Supervisor, stop: StopSignal) -> None:
        server = build_server(ZmqDispatcher(supervisor), start_directory=start_directory or os.getcwd())
        app = GuardedMcpApp(server, token, host)
        app.port = bound_port
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=2
        )
        web = uvicorn.Server(config)
        # Our loop handlers own SIGTERM/SIGINT; uvicorn's would re-raise them after exit.
        web.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]

        def graceful() -> None:
            web.should_exit = True

        stop.hook = graceful
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        click.echo(f"listening on http://{shown}:{bound_port}/mcp", file=sys.stdout)
        sys.stdout.flush()
        try:
            await web.serve(sockets=[sock])
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    asyncio.run(_serve(runtime, serve))


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
