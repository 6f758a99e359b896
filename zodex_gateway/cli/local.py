"""``zodex local …``: Zodex Local's commands, a thin click layer over typed functions
(zodex_gateway.local)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from enum import IntEnum

import click

from zodex_gateway.config.operator_command import zodex_command
from zodex_gateway.config.settings import LocalConfig, config_path, format_value
from zodex_gateway.config.units import ConfigError, parse_duration_ms
from zodex_gateway.history import HistoryStore, clear_history, render
from zodex_gateway.local import lifecycle
from zodex_gateway.local.address import rotate_token as rotate_mcp_token
from zodex_gateway.local.bearer import ensure_bearer, rotate_bearer
from zodex_gateway.local.client_config import CLIENTS, connect_snippet, http_snippet
from zodex_gateway.local.observer_access import observer_access
from zodex_gateway.local.paths import LocalPaths


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # the operation was tried and did not work (start failed, …)
    REFUSED = 2  # the request is not allowed now or is malformed (config set while running, …)


def fail(message: str, code: Exit = Exit.FAILED) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@click.group()
def local() -> None:
    """Zodex Local: a background runtime serving MCP on loopback as your own user."""


@local.command()
@click.option("--tunnel-command", help="A tunnel client command line to run with the runtime.")
@click.option("--tunnel-id", help="An identifier passed to the tunnel as ZODEX_TUNNEL_ID.")
@click.option(
    "--rotate-observability-bearer",
    is_flag=True,
    help="Replace the observer API's bearer secret; a running runtime accepts only the new one at once.",
)
@click.option(
    "--rotate-token",
    is_flag=True,
    help="Replace the MCP token (kept across starts with mcp.token = persistent). Refused while Local runs.",
)
def setup(
    tunnel_command: str | None, tunnel_id: str | None, rotate_observability_bearer: bool, rotate_token: bool
) -> None:
    """Create Zodex Local's directories and the observer API's bearer, and optionally
    record a tunnel.

    The tunnel command runs as `$SHELL -c <command>` whenever Local starts, with
    ZODEX_MCP_URL, ZODEX_MCP_TOKEN and ZODEX_MCP_TOKEN_FILE in its environment, and is
    ended when Local stops.
    """
    paths = LocalPaths.from_env()
    if rotate_token:
        _refuse_while_running("before replacing its MCP token")
    paths.create()
    click.echo(f"state directory: {paths.state}")
    if rotate_token:
        rotate_mcp_token(paths)
        click.echo(f"MCP token replaced: {paths.token}")
    if rotate_observability_bearer:
        rotate_bearer(paths.observer_bearer)
        click.echo(f"observer bearer replaced: {paths.observer_bearer}")
    else:
        ensure_bearer(paths.observer_bearer)
    if tunnel_command is not None or tunnel_id is not None:
        tunnel = {"tunnel.command": tunnel_command, "tunnel.id": tunnel_id}

        def record_tunnel(settings: LocalConfig) -> None:
            for key, value in tunnel.items():
                if value is not None:
                    settings.set(key, value)

        _update_config(record_tunnel)
        click.echo(f"tunnel recorded in {config_path()}")


@local.command()
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=False, resolve_path=True))
@click.option("--ttl", help="Stop automatically after this long (wall clock), e.g. 30min, 4h, 2d.")
def start(path: str | None, ttl: str | None) -> None:
    """Start Zodex Local in the background, in PATH (default: the current directory).

    Commands run with this shell's environment and its login shell ($SHELL). Returns once
    the runtime answers MCP, and prints its URL and how to connect. If Local already runs,
    reports it and changes nothing.
    """
    ttl_seconds = None
    if ttl is not None:
        try:
            ttl_seconds = parse_duration_ms(ttl) / 1000
        except ConfigError as exc:
            fail(f"--ttl: {exc}", Exit.REFUSED)
    try:
        result = lifecycle.start(LocalPaths.from_env(), path or os.getcwd(), ttl_seconds)
    except (lifecycle.LocalError, ConfigError) as exc:
        fail(str(exc))
        return
    d = result.discovery
    if result.already_running:
        click.echo(f"Zodex Local is already running (runtime {d.runtime_id}, started {d.started_at}).")
    else:
        click.echo(f"Zodex Local started (runtime {d.runtime_id}).")
    click.echo(f"  start directory: {d.start_directory}")
    click.echo(f"  MCP URL:         {d.mcp['url']}")
    click.echo(f"  token file:      {d.mcp['token_path']}  (send it as X-Zodex-Local-Token)")
    never = f"never (stop with `{zodex_command('local', 'stop')}`)"
    click.echo(f"  expires:         {d.expires_at or never}")
    # One runnable command (a|b|c would paste as a pipeline); the other clients named apart.
    connect = zodex_command("local", "mcp-config", "--client", "claude")
    click.echo(f"Connect a client: `{connect}` (or --client codex, cursor or json).")


@local.command()
def stop() -> None:
    """Stop Zodex Local: refuse new calls, kill every command and worker, unpublish. Safe to repeat."""
    was_running = lifecycle.stop(LocalPaths.from_env())
    click.echo("Zodex Local stopped." if was_running else "Zodex Local is not running.")


@local.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Whether Zodex Local runs, where, until when, and how many commands it runs."""
    info = lifecycle.status(LocalPaths.from_env())
    if as_json:
        click.echo(lifecycle.dumps(info))
        return
    if info.get("crashed"):
        click.echo(f"Zodex Local crashed (runtime {info['runtime_id']}, pid {info['pid']}): {info['reason']}")
        for line in info["log"][1:]:  # the first is the reason, said above
            click.echo(f"  {line}")
        stop, logs = zodex_command("local", "stop"), zodex_command("local", "logs")
        click.echo(f"`{stop}` cleans up after it; `{logs}` shows more.")
        return
    if not info["running"]:
        click.echo(f"Zodex Local is not running. Start it with `{zodex_command('local', 'start')}`.")
        return
    click.echo(f"Zodex Local is running (runtime {info['runtime_id']}, pid {info['pid']}).")
    click.echo(f"  start directory:  {info['start_directory']}")
    click.echo(f"  started:          {info['started_at']}")
    click.echo(f"  expires:          {info['expires_at'] or 'never'}")
    click.echo(f"  MCP URL:          {info['mcp_url']}")
    watch = zodex_command("local", "watch")
    click.echo(f"  observer API:     {info['observer_url'] or 'none'} (watch it: `{watch}`)")
    click.echo(f"  active processes: {info['active_process_count']}")


@local.group()
def config() -> None:
    """Read or change Local's settings ($XDG_CONFIG_HOME/zodex/local.toml)."""


@config.command("get")
@click.argument("key", required=False)
def config_get(key: str | None) -> None:
    """Print one setting, or all of them (defaults marked)."""
    try:
        settings = LocalConfig.load(config_path())
        if key is not None:
            click.echo(format_value(key, settings.get(key)))
            return
        for name, value, is_default in settings.items():
            click.echo(f"{name} = {value}{'  (default)' if is_default else ''}")
    except ConfigError as exc:
        fail(str(exc), Exit.REFUSED)


class _LiteralValue(click.Command):
    """``set KEY VALUE`` takes VALUE as typed, even when it looks like an option (``-1``,
    ``-5s``, ``--help``, ``--``): click would answer those with a usage error instead of the
    key's own one-line refusal. ``set --help`` and ``set -- KEY VALUE`` parse as usual."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if len(args) == 2 and not args[0].startswith("-"):
            args = [args[0], "--", args[1]]
        return super().parse_args(ctx, args)


@config.command("set", cls=_LiteralValue)
@click.argument("key")
@click.argument("value")
def config_set(key: str, value: str) -> None:
    """Change one setting. Refused while Local runs: stop it first."""
    _update_config(lambda settings: settings.set(key, value))
    click.echo(f"{key} = {format_value(key, LocalConfig.load(config_path()).get(key))}")


@config.command("unset")
@click.argument("key")
def config_unset(key: str) -> None:
    """Put one setting back to its default. Refused while Local runs: stop it first."""
    _update_config(lambda settings: settings.unset(key))
    click.echo(f"{key} = {format_value(key, LocalConfig.load(config_path()).get(key))}  (default)")


def _refuse_while_running(before: str) -> None:
    running = lifecycle.active(LocalPaths.from_env())
    if running is not None:
        fail(
            f"Zodex Local is running (runtime {running.runtime_id}); stop it with "
            f"`{zodex_command('local', 'stop')}` {before}",
            Exit.REFUSED,
        )


def _update_config(change: Callable[[LocalConfig], None]) -> None:
    _refuse_while_running("before changing its configuration")
    try:
        settings = LocalConfig.load(config_path())
        change(settings)
        settings.save(config_path())
    except ConfigError as exc:
        fail(str(exc), Exit.REFUSED)
    except OSError as exc:
        fail(f"cannot write {config_path()}: {exc.strerror or exc}")


@local.command()
@click.option(
    "--lines",
    "-n",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="How many of the last lines.",
)
@click.option("--follow", "-f", is_flag=True, help="Then print each new line as it is written; Ctrl-C stops.")
def logs(lines: int, follow: bool) -> None:
    """Print the end of the runtime's log (rotated at log.max-size, log.keep kept): one line per tool call,
    worker start and end, and error (docs/modes.md#logs)."""
    from zodex_system.log_follow import echo_safely

    paths = LocalPaths.from_env()
    if not follow:
        for line in lifecycle.tail_lines(paths.log_file, lines):
            echo_safely(line)
        return
    from zodex_gateway.local.log_follow import follow as follow_log

    try:
        follow_log(paths.log_file, lines, echo_safely)
    except KeyboardInterrupt:
        return  # Ctrl-C is how following ends
    except lifecycle.LocalError as exc:
        fail(str(exc))


@local.group(invoke_without_command=True)
@click.option("--last", "last", type=int, help="Only the newest N invocations.")
@click.option("--since", help="Only invocations started within this long, e.g. 2h, 30min, 7d.")
@click.option("--agent", "agent_id", help="Only this agent's invocations (its four-character id).")
@click.option("--workdir", help="Only invocations in this absolute workdir (as given or its real path).")
@click.option("--id", "invocation_id", help="Only this invocation.")
@click.option("--raw", is_flag=True, help="Include the exact stored arguments and results.")
@click.option(
    "--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True
)
@click.pass_context
def history(
    ctx: click.Context,
    last: int | None,
    since: str | None,
    agent_id: str | None,
    workdir: str | None,
    invocation_id: str | None,
    raw: bool,
    fmt: str,
) -> None:
    """Show recorded tool calls (readable whether Local runs or not)."""
    if ctx.invoked_subcommand is not None:
        return
    since_ts = None
    if since is not None:
        try:
            since_ts = time.time() - parse_duration_ms(since) / 1000
        except ConfigError as exc:
            fail(f"--since: {exc}", Exit.REFUSED)
    if workdir is not None and not os.path.isabs(workdir):
        fail(f"--workdir must be an absolute path: {workdir}", Exit.REFUSED)
    if last is not None and last < 1:
        fail("--last must be at least 1", Exit.REFUSED)
    store = HistoryStore(LocalPaths.from_env().history, recover=False)
    try:
        found = store.invocations(
            last=last, since=since_ts, agent_id=agent_id, workdir=workdir, invocation_id=invocation_id
        )
        agents = {a.agent_id: a for a in store.agents()}
        if fmt == "json":
            click.echo(render.to_json(found, raw=raw, agents=agents))
        else:
            click.echo(render.to_markdown(found, agents, raw=raw))
    finally:
        store.close()


@history.command("clear")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def history_clear(yes: bool) -> None:
    """Delete every recorded invocation, agent and output. Refused while Local runs."""
    paths = LocalPaths.from_env()
    _refuse_while_running("before clearing its history")
    if not yes and not click.confirm(f"Delete all history in {paths.history}?", default=False):
        click.echo("Nothing was deleted.")
        return
    removed = clear_history(paths.history)
    click.echo(f"History cleared ({removed} files removed).")


@local.command()
@click.option("--no-open", is_flag=True, help="Print Liveboard's URL without opening a browser.")
@click.option("--tui", is_flag=True, help="Watch in this terminal instead of a browser.")
@click.option("--agent", "agent_id", help="With --tui: follow only this agent (its four-character id).")
@click.option("--all", "show_all", is_flag=True, help="With --tui: show every agent.")
def watch(no_open: bool, tui: bool, agent_id: str | None, show_all: bool) -> None:
    """Watch what agents do, live: Liveboard in your browser, or --tui in this terminal.

    Liveboard is served on a random loopback port under a secret URL made for this run;
    Ctrl-C stops the viewer only (the runtime keeps running).
    """
    if (agent_id is not None or show_all) and not tui:
        fail("--agent and --all apply only with --tui", Exit.REFUSED)
    if agent_id is not None and show_all:
        fail("--agent and --all exclude each other", Exit.REFUSED)
    paths = LocalPaths.from_env()
    try:
        access = observer_access(paths)
    except lifecycle.LocalError as exc:
        fail(str(exc))
        return
    if tui:
        from zodex_gateway.viewers.tui import run_tui

        sys.exit(run_tui(access, agent_id=agent_id, show_all=show_all))
    from zodex_gateway.viewers.watch import run_watch
    from zodex_gateway.web.listener_limits import ListenerLimits

    try:
        limits = ListenerLimits.from_config(LocalConfig.load(config_path()))
    except ConfigError as exc:
        fail(str(exc))
        return
    run_watch(
        lambda: observer_access(paths),
        open_browser=not no_open,
        announce=lambda url: click.echo(f"Liveboard: {url}"),
        limits=limits,
    )


@local.command("mcp-config")
@click.option("--client", type=click.Choice(CLIENTS), default="json", show_default=True)
@click.option("--http", "over_http", is_flag=True, help="The running Local's URL and token header instead.")
def mcp_config(client: str, over_http: bool) -> None:
    """Print what to paste into an MCP client, in that client's own shape, and (on stderr)
    one line saying where it goes.

    By default: an entry that starts `zodex local connect`, which survives restarts of
    Local and holds no token. With --http: the running Local's URL and token header.
    """
    if over_http:
        running = lifecycle.active(LocalPaths.from_env())
        if running is None:
            fail(
                f"Zodex Local is not running; start it with `{zodex_command('local', 'start')}` "
                "(the HTTP entry names its URL and token)"
            )
            return
        snippet = http_snippet(client, running)
    else:
        snippet = connect_snippet(client)
    click.echo(snippet.where, err=True)
    click.echo(snippet.text)


@local.command()
def connect() -> None:
    """An MCP server on stdin/stdout that forwards to the running Zodex Local: the entry
    for clients that start their servers (Claude Code, Codex, Cursor, Inspector).

    It finds Local anew on every call, so it keeps working across `stop` and `start`; it
    lists the tools even while Local is down, and its calls then fail saying how to start it.
    """
    from zodex_gateway.local.bridge.stdio import run_bridge

    sys.exit(run_bridge(LocalPaths.from_env()))
