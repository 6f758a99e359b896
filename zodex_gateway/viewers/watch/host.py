"""Running one viewer: bind a random loopback port, make the secret, serve until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import threading
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Final

from zodex_gateway.viewers.liveboard import STATIC_DIR
from zodex_gateway.viewers.watch.app import create_watch_app
from zodex_gateway.viewers.watch.proxy import AccessSource, ObserverProxy
from zodex_gateway.web.listener_limits import ListenerLimits
from zodex_gateway.web.server import Listeners, listen

LOOPBACK: Final = "127.0.0.1"
SECRET_BYTES: Final = 24  # 32 URL-safe characters
# Open event streams end as soon as the host stops; this only bounds a stuck request.
GRACEFUL_S: Final = 2


class WatchHost:
    """A bound socket, a per-run secret, and the app that checks both."""

    def __init__(
        self, source: AccessSource, *, static_dir: Path = STATIC_DIR, limits: ListenerLimits | None = None
    ) -> None:
        self._limits = limits or ListenerLimits()
        self.secret = secrets.token_urlsafe(SECRET_BYTES)
        self._sock = listen(LOOPBACK, 0)  # connections queue from now on, before uvicorn runs
        self.port: int = self._sock.getsockname()[1]
        self._proxy = ObserverProxy(source)
        self._app, self._routes = create_watch_app(
            self.secret, self._proxy, port=self.port, static_dir=static_dir
        )

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/{self.secret}/"

    async def serve(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; then end every event stream and close the socket."""
        listeners = Listeners(self._limits, lifespan="off", graceful_s=GRACEFUL_S)
        listeners.add(self._app, self._sock)

        async def stop_when_told() -> None:
            await stop.wait()
            self._routes.closing.set()
            listeners.stop()

        stopper = asyncio.create_task(stop_when_told())
        try:
            await listeners.serve()
        finally:
            stopper.cancel()
            self._routes.closing.set()
            await self._proxy.aclose()
            with contextlib.suppress(OSError):
                self._sock.close()  # already closed, unless serving failed to start


def run_watch(
    source: AccessSource,
    *,
    open_browser: bool,
    announce: Callable[[str], None],
    limits: ListenerLimits | None = None,
) -> None:
    """``zodex local watch`` without ``--tui``: serve Liveboard until SIGINT or SIGTERM."""
    host = WatchHost(source, limits=limits)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        announce(host.url)
        if open_browser:
            # Some browsers block until they exit; the viewer must keep serving meanwhile.
            threading.Thread(target=webbrowser.open, args=(host.url,), daemon=True).start()
        await host.serve(stop)

    asyncio.run(main())
