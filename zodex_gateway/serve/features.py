"""Opening what Local mode adds around the tools — history, event capture, model context —
and closing it again, for any gateway (foreground or the Local runtime)."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from zodex_gateway.config.settings import LocalConfig, config_path
from zodex_gateway.config.units import ConfigError
from zodex_gateway.context import ContextProvider, ContextSwitches
from zodex_gateway.history import HistoryStore
from zodex_gateway.history.capture import EventCapture
from zodex_gateway.mcp.local_features import LocalFeatures
from zodex_gateway.observer.feed import ObserverFeed
from zodex_gateway.observer.hub import EventHub
from zodex_gateway.workers.supervisor import Supervisor

log = logging.getLogger("zodex.gateway")

RETENTION_EVERY_S = 3600.0


@dataclass
class FeatureOptions:
    history: bool = True
    stdio_connection: str | None = None


class OpenFeatures:
    def __init__(
        self,
        features: LocalFeatures,
        capture: EventCapture | None,
        retention: asyncio.Task[None] | None,
        hub: EventHub | None = None,
        feed: ObserverFeed | None = None,
    ):
        self.features = features
        self.hub = hub  # with history: the events viewers subscribe to
        self.feed = feed
        self._capture = capture
        self._retention = retention

    async def close(self) -> None:
        if self.hub is not None:
            self.hub.close()
        if self._retention is not None:
            self._retention.cancel()
        if self._capture is not None:
            await self._capture.close()
        if self.features.history is not None:
            self.features.history.close()


def _config() -> LocalConfig:
    try:
        return LocalConfig.load(config_path())
    except ConfigError as exc:
        log.warning("ignoring %s", exc)
        return LocalConfig(values={})


async def open_features(supervisor: Supervisor, options: FeatureOptions) -> OpenFeatures:
    config = _config()
    context = ContextProvider(
        env=dict(os.environ), home=Path.home(), switches=ContextSwitches.from_config(config.flag)
    )
    if not options.history:
        return OpenFeatures(
            LocalFeatures(context=context, stdio_connection=options.stdio_connection), None, None
        )
    max_age_ms = config.duration_ms("history.max-age")
    max_bytes = config.size_bytes("history.max-size")
    # Off the loop: a history made before incremental vacuum is rewritten once on opening.
    store = await asyncio.to_thread(
        HistoryStore,
        supervisor.runtime.state_dir / "history",
        max_bytes=max_bytes,
        output_cap_bytes=supervisor.runtime.limits.spill_file_cap_bytes,
    )
    hub = EventHub()
    feed = ObserverFeed(store, hub)
    capture = EventCapture(
        store,
        supervisor.codec,
        sink=feed.worker_events,
        sink_idle=feed.ignores_worker_events,
    )
    supervisor.add_new_worker_listener(capture.attach)

    async def keep_retention() -> None:
        while True:
            removed = await asyncio.to_thread(
                store.apply_retention, max_age_s=max_age_ms / 1000, max_bytes=max_bytes
            )
            if removed:
                log.info("history retention removed %d invocations", removed)
            await asyncio.sleep(RETENTION_EVERY_S)

    retention = asyncio.create_task(keep_retention())
    features = LocalFeatures(
        history=store, context=context, stdio_connection=options.stdio_connection, watchers=[feed]
    )
    return OpenFeatures(features, capture, retention, hub, feed)
