"""A stable address (docs/modes.md#a-stable-address): the MCP port and token a runtime
takes, so that clients configured for one start still reach the next.

The port: ``mcp.port`` when set (taken or refused, never another); else the port the last
runtime listened on, when it is free; else any free port. It is remembered in the state
directory because ``discovery.json`` goes away at stop. The token: one kept across starts
until ``zodex local setup --rotate-token`` (``mcp.token = persistent``, the default, so a
pasted HTTP entry keeps working), or a fresh one at every start (``per-start``).

Light on imports, like :mod:`zodex_gateway.local.lifecycle`, which checks a pinned port
before it starts the runtime.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable

from zodex_gateway.config.operator_command import zodex_command
from zodex_gateway.local.bearer import write_secret
from zodex_gateway.local.paths import LocalPaths
from zodex_system.secret_files import read_secret_file

HOST = "127.0.0.1"
PER_START = "per-start"
MIN_TOKEN_CHARS = 32  # what the MCP endpoint requires of a token (docs/modes.md#mcp-endpoint)


class PortUnavailable(Exception):
    """The pinned ``mcp.port`` cannot be listened on: one line for the operator."""


def port_refusal(port: int, exc: OSError) -> str:
    return (
        f"mcp.port {port} is not free ({exc.strerror or exc}); free it, or run "
        f"`{zodex_command('local', 'config', 'unset', 'mcp.port')}` to use any free port"
    )


def check_pinned_port(port: int) -> None:
    """Raise :class:`PortUnavailable` when ``port`` cannot be bound on loopback now (as the
    runtime binds it: with ``SO_REUSEADDR``, so a port in TIME_WAIT counts as free)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((HOST, port))
    except OSError as exc:
        raise PortUnavailable(port_refusal(port, exc)) from exc
    finally:
        probe.close()


def listen_mcp(
    paths: LocalPaths, pinned: int | None, listen: Callable[[str, int], socket.socket]
) -> socket.socket:
    """The runtime's MCP socket, by the rules above; the port taken is remembered."""
    if pinned is not None:
        try:
            sock = listen(HOST, pinned)
        except OSError as exc:
            raise PortUnavailable(port_refusal(pinned, exc)) from exc
    else:
        sock = _listen_last(paths, listen) or listen(HOST, 0)
    _remember(paths, sock.getsockname()[1])
    return sock


def _listen_last(paths: LocalPaths, listen: Callable[[str, int], socket.socket]) -> socket.socket | None:
    last = last_port(paths)
    if last is None:
        return None
    try:
        return listen(HOST, last)
    except OSError:
        return None  # taken meanwhile by someone else: any free port, remembered instead


def last_port(paths: LocalPaths) -> int | None:
    try:
        text = paths.last_port.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def _remember(paths: LocalPaths, port: int) -> None:
    temp = paths.last_port.with_name(f".{paths.last_port.name}.{os.getpid()}")
    try:
        temp.write_text(f"{port}\n")
        os.replace(temp, paths.last_port)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()
        # Not remembered: the next start takes any free port, as before; nothing else is lost.


def mcp_token(paths: LocalPaths, policy: str | None) -> str:
    """The token this start serves: a fresh one for ``per-start``, else the kept one (made if
    missing or too short to be one), written ``0600`` where discovery.json says."""
    if policy != PER_START:
        # Trusted for as long as it is kept, so read only as a secret file of the user's own
        # (UnsafeSecretFile otherwise, one line), like the session key.
        try:
            kept = read_secret_file(paths.token).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            kept = ""
        if len(kept) >= MIN_TOKEN_CHARS:
            return kept
    return write_secret(paths.token)


def token_refusal() -> str:
    """What an HTTP request without this runtime's token is told: where the current entry is."""
    return f"missing or invalid token; print this runtime's HTTP entry with `{zodex_command('local', 'mcp-config', '--http')}`"


def rotate_token(paths: LocalPaths) -> str:
    """A new MCP token (``zodex local setup --rotate-token``); Local must not be running."""
    return write_secret(paths.token)
