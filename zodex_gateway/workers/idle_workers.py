"""At most ``worker.max-idle`` idle workers per gateway, the least recently used stopped
first (docs/sessions.md#idle-workers).

A workdir's worker stays after its commands end, until ``worker.idle-exit``: a model that
touches hundreds of workdirs in that time would otherwise keep hundreds of workers (tens of
megabytes each). Whenever this gateway adopts one more worker than the cap, it asks the
others, least recently used first, whether they are idle (``ping``) and asks the oldest idle
ones beyond the cap to ``retire``. The worker decides that itself, so a command started
meanwhile (by any gateway) is never cut off; one that retires leaves its tombstones, as an
idle exit does, so the handles of its finished sessions keep answering.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from zodex_gateway.workers.worker_client import WorkerClient
from zodex_protocol import messages
from zodex_protocol.errors import ProtocolError
from zodex_protocol.replies import Pong

log = logging.getLogger("zodex.gateway")

ASK_TIMEOUT_S: Final = 3.0
# A retiring worker kills nothing and writes its tombstones: it is gone well within this.
EXIT_WAIT_S: Final = 10.0


class UseOrder:
    """Worker ids, least recently used first."""

    def __init__(self) -> None:
        self._order: OrderedDict[str, None] = OrderedDict()

    def touch(self, worker_id: str) -> None:
        self._order[worker_id] = None
        self._order.move_to_end(worker_id)

    def forget(self, worker_id: str) -> None:
        self._order.pop(worker_id, None)

    def oldest_first(self) -> list[str]:
        return list(self._order)


class IdleWorkerCap:
    """One gateway's cap, over the supervisor's table of clients and its per-worker locks
    (the ones its spawns and connections take)."""

    def __init__(
        self,
        clients: dict[str, WorkerClient],
        locks: dict[str, asyncio.Lock],
        limit: int,
        stopping: Callable[[], bool],
    ) -> None:
        self._clients = clients
        self._locks = locks
        self._limit = limit
        self._stopping = stopping
        self._order = UseOrder()
        self._retiring: dict[str, asyncio.Future[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._again: str | None = None

    def touch(self, worker_id: str) -> None:
        """A call goes to this worker now."""
        self._order.touch(worker_id)

    def adopted(self, keep: str) -> None:
        """The supervisor took one more worker (``keep``, about to be used)."""
        if len(self._clients) <= self._limit or self._stopping():
            return
        if self._task is not None and not self._task.done():
            self._again = keep  # one more look once this one is done
            return
        self._task = asyncio.create_task(self._retire_idle(keep))

    def exited(self, worker_id: str) -> None:
        retiring = self._retiring.get(worker_id)
        if retiring is not None and not retiring.done():
            retiring.set_result(None)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _retire_idle(self, keep: str) -> None:
        while not self._stopping():
            for client in await idle_beyond_cap(self._clients, self._order, self._limit, keep=keep):
                await self._retire(client)
            if self._again is None:
                return
            keep, self._again = self._again, None

    async def _retire(self, client: WorkerClient) -> None:
        worker_id = client.worker_id
        async with self._locks.setdefault(worker_id, asyncio.Lock()):
            if (
                self._stopping()
                or self._clients.get(worker_id) is not client
                or not client.alive
                or client.busy
            ):
                return
            # Out of the table first: a call from now on waits for this lock, then finds
            # the worker gone (a new one, or the tombstones) — never a worker that stops.
            del self._clients[worker_id]
            exited = self._retiring[worker_id] = asyncio.get_running_loop().create_future()
            try:
                if not await ask_to_retire(client):
                    if client.alive and worker_id not in self._clients:
                        self._clients[worker_id] = client  # busy after all: kept
                    return
                log.info(
                    "worker for %s stopped: idle, the least recently used beyond %d idle workers "
                    "(worker.max-idle)",
                    client.record.workdir, self._limit,
                )  # fmt: skip
                await wait_gone(exited, client.record.workdir)
                self._order.forget(worker_id)
            finally:
                self._retiring.pop(worker_id, None)


async def idle_beyond_cap(
    clients: dict[str, WorkerClient], order: UseOrder, limit: int, *, keep: str
) -> list[WorkerClient]:
    """The least recently used idle workers beyond ``limit`` (``keep``, the one just
    used, is not counted). Busy here means a request of ours in flight, or a worker that
    says it runs something."""
    idle: list[WorkerClient] = []
    for worker_id in order.oldest_first():
        client = clients.get(worker_id)
        if client is None or not client.alive or worker_id == keep or client.busy:
            continue
        try:
            pong = Pong.from_body(await client.request(messages.PING, {}, timeout=ASK_TIMEOUT_S))
        except (TimeoutError, ProtocolError):
            continue  # the health check deals with a worker that does not answer
        if pong.live_sessions == 0:
            idle.append(client)
    return idle[: max(0, len(idle) - limit)]


async def ask_to_retire(client: WorkerClient) -> bool:
    """True when the worker agreed and is stopping; False when it was busy after all."""
    try:
        body = await client.request(messages.RETIRE, {}, timeout=ASK_TIMEOUT_S)
    except (TimeoutError, ProtocolError):
        return False
    return isinstance(body, dict) and body.get("stopping") is True


async def wait_gone(exited: asyncio.Future[None], workdir: str) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(exited), EXIT_WAIT_S)
    except TimeoutError:
        log.warning("the idle worker for %s agreed to stop but is still running", workdir)
