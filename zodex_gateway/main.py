"""``zodex-gateway``: the MCP gateway, over stdio or streamable HTTP, in the foreground."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from zodex_gateway.agents.session_ids import BadSessionKey, load_or_create_session_ids
from zodex_gateway.local.front import LocalFront, load_or_create_token
from zodex_gateway.local.paths import LocalPaths
from zodex_gateway.redaction import SECRETS, watch_secret_files
from zodex_gateway.serve.running import serve_until_stopped
from zodex_gateway.serve.transports import http_transport, stdio_transport
from zodex_gateway.web.server import listen
from zodex_gateway.workers.runtime import Runtime
from zodex_protocol.limits import Limits
from zodex_system import log_lines, xdg
from zodex_system.private_dirs import UnsafeDirectory


def _limits_from_env() -> Limits:
    """``ZODEX_LIMITS`` (a JSON object of docs/config.md#keys overrides) — how tests shrink the clock."""
    raw = os.environ.get("ZODEX_LIMITS")
    return Limits.from_dict(json.loads(raw)) if raw else Limits()


def _open_runtime(runtime_dir: Path | None, state_dir: Path | None) -> Runtime:
    limits = _limits_from_env()
    if runtime_dir is not None:
        runtime = Runtime.join(runtime_dir, state_dir=state_dir, limits=limits)
    else:
        try:
            runtime = Runtime.create(state_dir=state_dir, limits=limits)
        except UnsafeDirectory as exc:
            raise click.ClickException(str(exc)) from None
    watch_secret_files(LocalPaths(runtime.state_dir).secret_files)  # it writes Local's history
    return runtime


_common = [
    click.option(
        "--runtime-dir", type=click.Path(path_type=Path), help="Join this runtime instead of starting one."
    ),
    click.option(
        "--state-dir", type=click.Path(path_type=Path), help="Where spill files live (default: XDG state)."
    ),
    click.option("--start-directory", help="Directory named in the server instructions (default: cwd)."),
    click.option("--no-history", is_flag=True, help="Do not record calls and output in the history store."),
]


def common_options(f: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_common):
        f = option(f)
    return f


@click.group()
@click.version_option(package_name="zodex")
def cli() -> None:
    """Zodex MCP gateway: exec_command, write_stdin and apply_patch on this machine."""
    log_lines.log_to_stderr("zodex-gateway %(levelname)s %(message)s", logging.WARNING)


@cli.command()
@common_options
def stdio(
    runtime_dir: Path | None, state_dir: Path | None, start_directory: str | None, no_history: bool
) -> None:
    """Speak MCP on stdin/stdout (for clients that spawn their servers)."""
    runtime = _open_runtime(runtime_dir, state_dir)
    transport = stdio_transport(start_directory or os.getcwd(), history=not no_history)
    asyncio.run(serve_until_stopped(runtime, transport))


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
    no_history: bool,
    host: str,
    port: int,
    token_file: Path,
) -> None:
    """Speak stateless streamable HTTP on /mcp, guarded by a token and a Host check."""
    try:
        token = load_or_create_token(token_file)
        SECRETS.add(token)  # never stored in history or shown to a viewer
        # Session ids outlive this gateway: signed by the key kept with its state.
        session_ids = load_or_create_session_ids(LocalPaths(state_dir or xdg.local_state_dir()).session_key)
        sock = listen(host, port)
    except (OSError, ValueError, BadSessionKey, UnsafeDirectory) as exc:
        raise click.ClickException(str(exc)) from exc
    runtime = _open_runtime(runtime_dir, state_dir)

    def announce(url: str) -> None:
        click.echo(f"listening on {url}")
        sys.stdout.flush()

    front = LocalFront.admitting(token, sock.getsockname()[0])
    transport = http_transport(
        sock, front, start_directory or os.getcwd(), announce, history=not no_history, session_ids=session_ids
    )
    asyncio.run(serve_until_stopped(runtime, transport))


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
