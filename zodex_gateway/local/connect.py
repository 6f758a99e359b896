"""``zodex local connect``: MCP on stdin/stdout, forwarded to the running Local runtime
(docs/modes.md#zodex-local-connect).

For clients that start their servers (Claude Code, Codex, Cursor, Inspector): the client's
configuration names only this command, never a URL or a token. Every tool call looks the
runtime up again in ``discovery.json`` and reads its ``0600`` token file, so one bridge
keeps working across ``zodex local stop`` and ``start``. It answers ``initialize`` and
``tools/list`` itself (the tools Local lists, built from the configured limits), so a
client connects even while Local is down; a tool call then fails saying how to start it.

One bridge is one conversation: it makes one handshake toward the runtime and sends the
``Mcp-Session-Id`` the runtime returned on every later call, for its whole life and across
restarts, so the runtime attributes all its calls to one agent. A runtime that returns no
id gets none. A call's arguments and ``_meta`` reach the runtime as the client sent them,
and its result or error comes back as the runtime sent it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from zodex_gateway.config.operator_command import zodex_command
from zodex_gateway.config.settings import ConfigError, LocalConfig, config_path
from zodex_gateway.local import lifecycle
from zodex_gateway.local.paths import LocalPaths
from zodex_gateway.mcp import tools
from zodex_gateway.mcp.server import SERVER_NAME, error_result, instructions
from zodex_system.private_dirs import UnsafeDirectory

log = logging.getLogger("zodex.connect")

HANDSHAKE_VERSION = "2025-06-18"  # the handshake revision the bridge speaks to the runtime
TOKEN_HEADER = "X-Zodex-Local-Token"
SESSION_HEADER = "mcp-session-id"
# A call may wait as long as session.yield-max allows (and a patch as long as it takes):
# no read deadline; connecting to a loopback port either works at once or not at all.
TIMEOUT = httpx.Timeout(None, connect=5.0)


def not_running_message() -> str:
    return f"Zodex Local is not running; start it with {zodex_command('local', 'start')}"


class NotRunning(Exception):
    pass


@dataclass(frozen=True)
class Target:
    """The running runtime as ``discovery.json`` describes it at the moment of a call."""

    runtime_id: str
    url: str
    token: str


class Bridge:
    """Forwards tool calls to whichever runtime runs now, as one MCP session."""

    def __init__(self, paths: LocalPaths, http: httpx.AsyncClient) -> None:
        self._paths = paths
        self._http = http
        self._session_id: str | None = None
        self._protocol_version = HANDSHAKE_VERSION
        self._handshaken_with: str | None = None  # runtime id, while no session id was given
        self._handshake_lock = asyncio.Lock()
        self._ids = itertools.count(1)

    def find(self) -> Target:
        """The running runtime, read anew (it may have restarted on another port)."""
        try:
            discovery = lifecycle.active(self._paths)
        except UnsafeDirectory as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        if discovery is None:
            raise NotRunning
        try:
            token = Path(discovery.mcp["token_path"]).read_text().strip()
        except OSError:
            raise NotRunning from None  # stopped between the two reads
        return Target(discovery.runtime_id, discovery.mcp["url"], token)

    async def list_tools(
        self, _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        # The configuration of now: what the runtime lists, or will list once started.
        try:
            config = LocalConfig.load(config_path())
        except ConfigError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        listed = tools.tool_list(config.limits(), read_only_hint=config.flag("mcp.read-only-hint"))
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], _params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        params = dict(ctx.params or {})  # as the client sent them, _meta included
        try:
            return await self._forward("tools/call", params)
        except NotRunning:
            return _dump(error_result(not_running_message()))
        except httpx.HTTPError as exc:
            # Connected, then lost: the runtime stopped during the call, or never answered.
            message = (
                f"Zodex Local did not answer the call ({type(exc).__name__}: {exc}); it may have stopped"
            )
            return _dump(error_result(message))

    async def _forward(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        for attempt in range(2):
            target = self.find()
            body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
            try:
                await self._handshake(target)
                response = await self._post(target, body)
            except httpx.ConnectError:
                if attempt == 0:
                    continue  # stopped or restarting right now: look again once
                raise NotRunning from None
            if response.status_code == 404 and self._session_id is not None and attempt == 0:
                self._forget_session()  # the runtime no longer knows the id: a new handshake
                continue
            if response.status_code == 401 and attempt == 0:
                continue  # restarted with a new token between our reads: read again
            return _answer(response)
        raise NotRunning

    async def _handshake(self, target: Target) -> None:
        if self._session_id is not None or self._handshaken_with == target.runtime_id:
            return
        async with self._handshake_lock:
            if self._session_id is not None or self._handshaken_with == target.runtime_id:
                return
            initialize = {
                "jsonrpc": "2.0",
                "id": next(self._ids),
                "method": "initialize",
                "params": {
                    "protocolVersion": HANDSHAKE_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "zodex-local-connect", "version": _version()},
                },
            }
            response = await self._post(target, initialize)
            result = _answer(response)
            self._protocol_version = str(result.get("protocolVersion") or HANDSHAKE_VERSION)
            self._session_id = response.headers.get(SESSION_HEADER) or None
            self._handshaken_with = target.runtime_id
            await self._post(target, {"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _forget_session(self) -> None:
        self._session_id = None
        self._handshaken_with = None

    async def _post(self, target: Target, body: dict[str, Any]) -> httpx.Response:
        headers = {
            TOKEN_HEADER: target.token,
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": self._protocol_version,
        }
        if self._session_id is not None:
            headers[SESSION_HEADER] = self._session_id
        return await self._http.post(target.url, json=body, headers=headers)


def _answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result, or the runtime's JSON-RPC error raised for the client to get."""
    try:
        message = response.json()
    except ValueError:
        message = None
    if isinstance(message, dict):
        result = message.get("result")
        if isinstance(result, dict):
            return result
        error = message.get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            raise MCPError(error["code"], str(error.get("message", "")), error.get("data"))
        if isinstance(error, str):  # the listener's own refusals: {"error": "..."}
            raise MCPError(types.INTERNAL_ERROR, f"Zodex Local answered HTTP {response.status_code}: {error}")
    raise MCPError(types.INTERNAL_ERROR, f"Zodex Local answered HTTP {response.status_code} without a result")


def _dump(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zodex")
    except PackageNotFoundError:
        return "0"


def build_bridge_server(bridge: Bridge, start_directory: str | None) -> Server[Any]:
    server: Server[Any] = Server(
        SERVER_NAME,
        version=_version(),
        instructions=instructions(start_directory),
        on_list_tools=bridge.list_tools,
        on_call_tool=_never_called,  # declares the tools capability; replaced just below
    )
    # Registered by method so that the runtime's result dict goes back as it came.
    server.add_request_handler("tools/call", types.CallToolRequestParams, bridge.call_tool)
    return server


async def _never_called(
    _ctx: ServerRequestContext[Any], _params: types.CallToolRequestParams
) -> types.CallToolResult:
    raise AssertionError("tools/call is handled by Bridge.call_tool")


async def serve_stdio(paths: LocalPaths) -> None:
    from mcp.server.stdio import stdio_server

    from zodex_gateway.mcp.jsonrpc_input import AnsweringReadStream

    # The start directory of the runtime running now, for the instructions (none if down).
    try:
        running = lifecycle.active(paths)
    except UnsafeDirectory:
        running = None  # every call will say why
    # One keep-alive connection to the runtime; connections a stopped runtime closed are
    # dropped by the pool and a new one is made to wherever the runtime now listens.
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=httpx.Limits(max_keepalive_connections=4)) as http:
        bridge = Bridge(paths, http)
        server = build_bridge_server(bridge, running.start_directory if running else None)
        async with stdio_server() as (read_stream, write_stream):
            reader = AnsweringReadStream(read_stream, write_stream)
            await server.run(reader, write_stream, server.create_initialization_options())


def run_bridge(paths: LocalPaths) -> int:
    # stdout is the protocol: anything logged goes to stderr, which clients show or keep.
    logging.basicConfig(level=logging.WARNING, format="zodex local connect %(levelname)s %(message)s")
    try:
        asyncio.run(serve_stdio(paths))
    except KeyboardInterrupt:
        pass
    return 0
