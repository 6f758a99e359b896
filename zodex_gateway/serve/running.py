"""Running a gateway until it is stopped: the transport serves until it ends (stdin closed)
or SIGTERM/SIGINT comes; then every worker — and with it every command — is stopped and the
runtime released. Local, Sprite and a fleet host run this way."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from zodex_gateway.workers.launcher import Launcher
from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.supervisor import Supervisor

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
