"""Running a gateway: its MCP transport (stdio, or HTTP behind a front), and stopping
everything cleanly afterwards."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from zodex_gateway.agents.session_ids import SessionIds
from zodex_gateway.mcp.jsonrpc_input import AnsweringReadStream
from zodex_gateway.mcp.server import server_for
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_gateway.serve.features import FeatureOptions, open_features
from zodex_gateway.serve.mcp_http import Front, McpHttpApp
from zodex_gateway.serve.stdio_pipes import loop_stdio
from zodex_gateway.web.listener_limits import ListenerLimits
from zodex_gateway.web.server import Listeners, base_url
from zodex_gateway.workers.dispatcher import ZmqDispatcher
from zodex_gateway.workers.launcher import Launcher
from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.supervisor import Supervisor

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

log = logging.getLogger("zodex.gateway")

GRACEFUL_TRANSPORT_S = 3.0


class StopSignal:
    """SIGTERM/SIGINT handling. A transport may begin its own graceful exit (uvicorn's) when
    the signal comes; the workers are stopped either way."""

    def __init__(self) -> None:
        self._graceful_exits: list[Callable[[], None]] = []
        self._cleanups: list[Callable[[], Coroutine[Any, Any, None]]] = []

    def add_graceful_exit(self, begin: Callable[[], None]) -> None:
        """``begin`` starts the transport's own graceful exit when a signal comes."""
        self._graceful_exits.append(begin)

    def add_cleanup(self, cleanup: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run after the workers are stopped, so their last events can still be recorded."""
        self._cleanups.append(cleanup)

    @property
    def exits_gracefully(self) -> bool:
        return bool(self._graceful_exits)

    def begin_graceful_exit(self) -> None:
        for begin in self._graceful_exits:
            begin()

    async def clean_up(self) -> None:
        for cleanup in self._cleanups:
            await cleanup()


Serve = Callable[[Supervisor, StopSignal], Coroutine[Any, Any, None]]


async def serve_until_stopped(runtime: Runtime, serve: Serve, launcher: Launcher | None = None) -> None:
    """Serve until the transport ends (stdin closed) or SIGTERM/SIGINT; then stop every
    worker — and with them every command — and release the runtime. ``launcher`` starts
    and signals the workers (Sprite's root helper); by default they are this process's children."""
    supervisor = Supervisor(runtime, launcher)
    loop = asyncio.get_running_loop()
    stop = StopSignal()
    signalled = asyncio.Event()

    def on_signal() -> None:
        supervisor.stop_accepting()  # refuse new calls at once
        stop.begin_graceful_exit()
        signalled.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    serving = asyncio.create_task(serve(supervisor, stop))
    waiting = asyncio.create_task(signalled.wait())
    await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not serving.done() and stop.exits_gracefully:
        await asyncio.wait({serving}, timeout=GRACEFUL_TRANSPORT_S)
    try:
        await supervisor.shutdown()
        await stop.clean_up()
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


def stdio_transport(start_directory: str, *, history: bool = True) -> Serve:
    async def serve(supervisor: Supervisor, stop: StopSignal) -> None:
        # One stdio gateway serves exactly one connection: that is its identity (docs/agents.md#identity).
        connection = f"{supervisor.runtime.runtime_id}:{os.getpid()}"
        opened = await open_features(supervisor, FeatureOptions(history=history, stdio_connection=connection))
        stop.add_cleanup(opened.close)
        tools = ToolDispatcher(
            ZmqDispatcher(supervisor), limits=supervisor.runtime.limits, local=opened.features
        )
        server = server_for(tools, start_directory=start_directory)
        async with loop_stdio() as wire:
            # On pipes, the wire is served on the loop, not in the SDK's threads (stdio_pipes).
            await _serve_stdio(server, wire)

    return serve


async def _serve_stdio(server: Server[Any], ends: tuple[object, object] | None) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server(*(cast(Any, end) for end in ends or ())) as (read_stream, write_stream):
        # Every line gets an answer: one that is not a JSON-RPC message gets an error.
        reader = AnsweringReadStream(read_stream, write_stream)
        await server.run(reader, write_stream, server.create_initialization_options())


def mcp_url(sock: socket.socket) -> str:
    return f"{base_url(sock)}/mcp"


@dataclass(frozen=True)
class ObserverServing:
    """Where and how the Local runtime serves its observer API (docs/observer.md)."""

    sock: socket.socket
    bearer: Callable[[], str]
    runtime_id: str
    started_at: float


def http_transport(
    sock: socket.socket,
    front: Front,
    start_directory: str,
    on_listening: Callable[[str], None],
    *,
    read_only_hint: bool = True,
    history: bool = True,
    observer: ObserverServing | None = None,
    limits: ListenerLimits | None = None,
    session_ids: SessionIds | None = None,
) -> Serve:
    """MCP over HTTP on ``sock``, behind ``front`` (Local's: Host and token); with
    ``observer`` (and history), the observer API too, on its own socket in the same loop.
    ``limits`` bound slow clients and bodies; ``session_ids`` signs the session ids
    handshake clients get (a key of this process only when None)."""
    limits = limits or ListenerLimits()

    async def serve(supervisor: Supervisor, stop: StopSignal) -> None:
        # One budget for both listeners: descriptors are the process's.
        listeners = Listeners(limits, lifespan="on", graceful_s=2)
        opened = await open_features(supervisor, FeatureOptions(history=history))
        stop.add_cleanup(opened.close)
        tools = ToolDispatcher(
            ZmqDispatcher(supervisor),
            limits=supervisor.runtime.limits,
            read_only_hint=read_only_hint,
            local=opened.features,
        )
        mcp = McpHttpApp.serving(
            tools, start_directory=start_directory, max_body=limits.max_body, session_ids=session_ids
        )
        listeners.add(front(mcp), sock)
        history_store = opened.features.history
        if observer is not None and history_store is not None and opened.hub is not None:
            from zodex_gateway.observer import create_observer_app

            observer_app = create_observer_app(
                history_store,
                runtime_id=observer.runtime_id,
                bearer_token=observer.bearer,
                started_at=observer.started_at,
                hub=opened.hub,
                on_alias=opened.feed.agent_updated if opened.feed is not None else None,
            )
            listeners.add(observer_app, observer.sock)

        def graceful() -> None:
            if opened.hub is not None:
                opened.hub.close()  # event streams never end by themselves
            listeners.stop()

        stop.add_graceful_exit(graceful)
        on_listening(mcp_url(sock))
        await listeners.serve()

    return serve
