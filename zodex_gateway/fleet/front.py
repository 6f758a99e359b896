"""The fleet gateway's front door (docs/fleet.md#gateways): ``GET /health`` open,
``/h/<host>/mcp`` (and ``/mcp/``) with that host's key, as Sprite's front admits it;
anything else is 404 with an empty body."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from zodex_gateway.fleet import keys
from zodex_gateway.sprite.auth import KeySource, SpriteFront
from zodex_gateway.sprite.key import KeyRefused, check_key

log = logging.getLogger("zodex.gateway")

COMPONENT = "zodex-gateway"
_ROUTE = re.compile(r"/h/([a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?)(/mcp/?)")


def read_mcp_key(path: Path) -> str:
    """One host's MCP key, read with the fleet's key-file rules and Sprite's key rules."""
    try:
        key = keys.read_secret_text(path)
        check_key(key, path)
    except KeyRefused as exc:
        raise keys.KeyFileError(
            str(exc).replace("run zodex sprite rotate-key", "make one with zodex host keygen --mcp")
        ) from None
    return key


class McpKeySource(KeySource):
    """Sprite's key source with the fleet's reading rules: the file is looked at again on
    each request (one ``stat``) and a new key is in force at once."""

    def __init__(self, path: Path, key: str) -> None:
        super().__init__(path, key)
        self._fleet_path = path

    def current(self) -> str | None:
        identity = self._identity()
        if identity != self._seen:
            self._seen = identity
            try:
                self._key = read_mcp_key(self._fleet_path)
                log.info("the key file %s changed; the new key is in force", self._fleet_path)
            except keys.KeyFileError as exc:
                self._key = None
                log.error("every request for this host is refused until its key is fixed: %s", exc)
        return self._key


class FleetFront:
    def __init__(self, hosts: dict[str, SpriteFront], *, version: str) -> None:
        self._hosts = hosts
        self._health = json.dumps({"status": "ok", "component": COMPONENT, "version": version}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/health" and scope["method"] in ("GET", "HEAD"):
            await _reply(send, 200, b"" if scope["method"] == "HEAD" else self._health)
            return
        match = _ROUTE.fullmatch(path)
        front = self._hosts.get(match.group(1)) if match else None
        if match is None or front is None:
            await _reply(send, 404, b"")
            return
        await front({**scope, "path": match.group(2), "raw_path": match.group(2).encode()}, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Each host's MCP app has its own lifespan (the SDK's session manager): start them
        all when the server starts, stop them all when it stops."""
        runs: list[tuple[asyncio.Queue[Message], asyncio.Queue[Message], asyncio.Task[None]]] = []

        async def each(message_type: str) -> list[Message]:
            for inbox, _outbox, _task in runs:
                await inbox.put({"type": message_type})
            return [await outbox.get() for _inbox, outbox, _task in runs]

        started = await receive()
        assert started["type"] == "lifespan.startup"
        for front in self._hosts.values():
            inbox: asyncio.Queue[Message] = asyncio.Queue()
            outbox: asyncio.Queue[Message] = asyncio.Queue()
            scope: dict[str, Any] = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
            task = asyncio.create_task(front(scope, inbox.get, outbox.put))
            runs.append((inbox, outbox, task))
        failed = [m for m in await each("lifespan.startup") if m["type"] != "lifespan.startup.complete"]
        if failed:
            await send({"type": "lifespan.startup.failed", "message": str(failed[0].get("message", ""))})
            return
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        await each("lifespan.shutdown")
        await asyncio.gather(*(task for _i, _o, task in runs), return_exceptions=True)
        await send({"type": "lifespan.shutdown.complete"})


async def _reply(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store")]
    if body:
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
