"""A gateway's MCP transports, as :mod:`zodex_gateway.serve.running` runs them: stdio, and
streamable HTTP behind the front of its mode (with Local's observer API beside it)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from zodex_gateway.agents.session_ids import SessionIds
from zodex_gateway.mcp.jsonrpc_input import AnsweringReadStream
from zodex_gateway.mcp.server import server_for
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_gateway.serve.features import FeatureOptions, open_features
from zodex_gateway.serve.mcp_http import Front, McpHttpApp
from zodex_gateway.serve.running import Serve, StopSignal
from zodex_gateway.serve.stdio_pipes import loop_stdio
from zodex_gateway.web.listener_limits import ListenerLimits
from zodex_gateway.web.server import Listeners, base_url
from zodex_gateway.workers.dispatcher import ZmqDispatcher
from zodex_gateway.workers.supervisor import Supervisor

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server


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
    steer: Callable[[], str] | None = None  # the steer token, with observer.steer on


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
            from zodex_gateway.observer import Steering, SupervisorSteer, create_observer_app

            steering = None
            if observer.steer is not None:
                steering = Steering(observer.steer, SupervisorSteer(supervisor), supervisor.runtime.limits)
            observer_app = create_observer_app(
                history_store,
                runtime_id=observer.runtime_id,
                bearer_token=observer.bearer,
                started_at=observer.started_at,
                hub=opened.hub,
                on_alias=opened.feed.agent_updated if opened.feed is not None else None,
                steering=steering,
                watchers=[opened.feed] if opened.feed is not None else [],
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
