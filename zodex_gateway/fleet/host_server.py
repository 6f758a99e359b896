"""A host's side of the wire (docs/fleet.md#the-wire): a ROUTER on ``tcp://`` with CURVE,
gateways admitted by ZAP against an allow list of public keys, the signed envelope
inside, each ``call`` answered by the host's own dispatcher.

The host checks the arguments and resolves the workdir itself: a gateway only forwards what
the model sent. Calls run concurrently (a long poll never holds up another call); each gets
exactly one reply, ``result``, ``patched`` or ``error``, but for a waiting call its gateway
cancelled, which gets none. A waiting call that asked for them (``_progress``) gets
``progress`` notes before its reply; a ``cancel`` ends only a call of the gateway that sent
it, looked up under that gateway's ROUTER identity.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import zmq
import zmq.asyncio
from zmq.auth.asyncio import AsyncioAuthenticator

from zodex_gateway.fleet.pending_peers import PendingPeers
from zodex_gateway.fleet.refusal_log import RefusalLog
from zodex_gateway.fleet.settings import DEFAULT_MAX_PENDING
from zodex_gateway.workers.dispatcher import Dispatcher
from zodex_gateway.workers.worker_client import ProgressListener
from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import SessionHandle
from zodex_protocol.limits import Limits, max_message_bytes
from zodex_protocol.progress import ProgressNote
from zodex_protocol.validation import CheckedWorkdir, check_write_args

log = logging.getLogger("zodex.host")

TOOLS = ("exec_command", "write_stdin", "apply_patch")
WAITING_TOOLS = ("exec_command", "write_stdin")  # the calls a cancel can end
# ZeroMQ's heartbeat: a gateway that stops answering is dropped; the gateway does the same.
HEARTBEAT_IVL_MS = 500
HEARTBEAT_TIMEOUT_MS = 1500
# A peer must finish the CURVE handshake this soon, or it is dropped: one that connects and
# sends nothing, or trickles its greeting, holds no connection for long.
HANDSHAKE_IVL_MS = 5000


def host_lost_message(handle: str, host: str) -> str:
    return (
        f"session {handle} was lost: host {host} restarted since the command started; start the command again"
    )


class IncarnationCheck:
    """A dispatcher that answers handles of the host's earlier lives itself: *lost* when
    the handle carries one of them, *unknown* when it carries none this host ever had."""

    def __init__(self, inner: Dispatcher, host: str, current: str, earlier: set[str], limits: Limits) -> None:
        self._inner = inner
        self._limits = limits
        self._host = host
        self._current = current
        self._earlier = earlier

    async def exec_command(
        self,
        args: Mapping[str, Any],
        *,
        tag: str | None = None,
        progress: ProgressListener | None = None,
        workdir: CheckedWorkdir | None = None,
    ) -> Any:
        return await self._inner.exec_command(args, tag=tag, progress=progress, workdir=workdir)

    async def write_stdin(self, args: Mapping[str, Any], *, progress: ProgressListener | None = None) -> Any:
        # The argument rules first, as in Local and Sprite: a bad argument is refused as such
        # whatever the handle says.
        text = check_write_args(args, self._limits)
        handle = SessionHandle.parse(text)
        if handle is None or handle.host != self._current:
            if handle is not None and handle.host in self._earlier:
                raise ProtocolError(ErrorCode.SESSION_LOST, host_lost_message(text, self._host))
            raise ProtocolError(ErrorCode.UNKNOWN_HANDLE, f"Unknown session handle: {text}")
        return await self._inner.write_stdin(args, progress=progress)

    async def apply_patch(self, args: Mapping[str, Any], *, workdir: CheckedWorkdir | None = None) -> Any:
        return await self._inner.apply_patch(args, workdir=workdir)

    async def close(self) -> None:
        await self._inner.close()


class AllowList:
    """ZAP's CURVE callback: a gateway is admitted when its public key is listed; refusals
    are logged within a :class:`RefusalLog`."""

    def __init__(self, keys: set[bytes], refusals: RefusalLog | None = None) -> None:
        self._keys = keys
        self.refusals = refusals or RefusalLog()

    def callback(self, _domain: str, key: bytes) -> bool:
        allowed = key in self._keys
        if not allowed:
            self.refusals.refused(key.decode("ascii", "replace"))
        return allowed


class HostServer:
    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        endpoint: str,
        secret_key: bytes,
        signing_key: bytes,
        gateway_keys: set[bytes],
        max_message: int = max_message_bytes(Limits()),
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self._dispatcher = dispatcher
        self._codec = WireCodec(signing_key)
        self._context = zmq.asyncio.Context()
        self._auth = AsyncioAuthenticator(self._context)
        self._auth.start()
        self._allow = AllowList(gateway_keys)
        self._auth.configure_curve_callback("*", credentials_provider=self._allow)
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.curve_server = True
        self._socket.curve_secretkey = secret_key
        self._socket.curve_publickey = zmq.curve_public(secret_key)
        self._socket.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        self._socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a reply to a gone gateway is dropped
        self._socket.setsockopt(zmq.MAXMSGSIZE, max_message)
        self._socket.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_IVL_MS)
        self._socket.bind(endpoint)
        self._pending = PendingPeers(self._socket, max_pending)
        self._tasks: set[asyncio.Task[None]] = set()
        # The calls in flight, under (gateway identity, message id): what a cancel can end.
        self._calls: dict[tuple[bytes, str], asyncio.Task[None]] = {}
        self._stopped = asyncio.Event()

    @property
    def bound(self) -> str:
        return str(self._socket.getsockopt_string(zmq.LAST_ENDPOINT))

    def stop(self) -> None:
        self._stopped.set()

    async def serve(self) -> None:
        receiving: asyncio.Future[list[bytes]] | None = None
        stopped = asyncio.ensure_future(self._stopped.wait())
        self._pending.start()
        try:
            while True:
                receiving = asyncio.ensure_future(self._socket.recv_multipart())
                await asyncio.wait({receiving, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not receiving.done():
                    break
                frames = receiving.result()
                task = asyncio.create_task(self._answer(frames))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            stopped.cancel()
            if receiving is not None and not receiving.done():
                receiving.cancel()
            if self._tasks:  # calls in flight end (the supervisor is stopping them) and reply
                await asyncio.wait(set(self._tasks), timeout=3.0)
            await self._pending.stop()
            self._socket.close(linger=0)
            self._auth.stop()
            self._context.term()
            self._allow.refusals.flush()

    async def _answer(self, frames: list[bytes]) -> None:
        if len(frames) < 3:
            return
        identity, wire = frames[0], frames[1:]
        try:
            request = self._codec.deserialize(wire)
        except ProtocolError as exc:
            message_id = self._codec.peek_id(wire)
            log.warning("unusable message from a gateway: %s", exc.message)
            if message_id is not None:
                error = Envelope(type=messages.ERROR, body=exc.to_wire(), reply_to=message_id)
                await self._send(identity, error)
            return
        if request.type == messages.CANCEL:
            self._cancel(identity, request.body)
            return
        key = (identity, request.id)
        task = asyncio.current_task()
        if task is not None and isinstance(request.body, dict) and request.body.get("tool") in WAITING_TOOLS:
            self._calls[key] = task  # only a wait is cancellable: a patch runs to its reply
        try:
            reply_type, body = await self._call(identity, request)
        except asyncio.CancelledError:
            if self._stopped.is_set():
                raise
            return  # its gateway cancelled it: no reply (the worker was told to end the wait)
        except ProtocolError as exc:
            reply_type, body = messages.ERROR, exc.to_wire()
        except TimeoutError:
            reply_type, body = (
                messages.ERROR,
                ProtocolError(
                    ErrorCode.WORKER_UNAVAILABLE, "the host's worker did not answer in time; try again"
                ).to_wire(),
            )
        except Exception as exc:
            log.exception("a call failed on the host")
            reply_type, body = (
                messages.ERROR,
                ProtocolError(
                    ErrorCode.INTERNAL, f"internal error on the host ({type(exc).__name__})"
                ).to_wire(),
            )
        finally:
            self._calls.pop(key, None)
        await self._send(identity, request.reply(reply_type, body))

    def _cancel(self, identity: bytes, body: object) -> None:
        """A gateway can end only its own calls' waits; an id naming nothing is ignored."""
        target = body.get("id") if isinstance(body, dict) else None
        call = self._calls.get((identity, target)) if isinstance(target, str) else None
        if call is not None:
            call.cancel()

    def _progress(self, identity: bytes, request: Envelope, every: object) -> ProgressListener | None:
        """The listener that sends a call's progress notes to its gateway, when it asked."""
        if every is None:
            return None
        if not isinstance(every, int) or isinstance(every, bool) or every <= 0:
            raise ProtocolError(
                ErrorCode.BAD_REQUEST, f"{messages.PROGRESS_KEY} is a positive interval in ms"
            )

        def heard(note: ProgressNote) -> None:
            task = asyncio.create_task(self._send(identity, request.reply(messages.PROGRESS, note.to_body())))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return ProgressListener(max(every, messages.MIN_PROGRESS_MS), heard)

    async def _call(self, identity: bytes, request: Envelope) -> tuple[str, Any]:
        if request.type != messages.CALL:
            raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {request.type!r}")
        body = request.body
        if not isinstance(body, dict):
            raise ProtocolError(ErrorCode.BAD_REQUEST, "a call's body must be a map")
        tool, args, tag = body.get("tool"), body.get("args"), body.get("tag")
        if tool not in TOOLS or not isinstance(args, dict) or not (tag is None or isinstance(tag, str)):
            raise ProtocolError(ErrorCode.BAD_REQUEST, "a call is {tool, args, tag?} with a known tool")
        progress = self._progress(identity, request, body.get(messages.PROGRESS_KEY))
        if tool == "exec_command":
            result = await self._dispatcher.exec_command(args, tag=tag, progress=progress)
            return messages.RESULT, result.to_body()
        if tool == "write_stdin":
            return messages.RESULT, (await self._dispatcher.write_stdin(args, progress=progress)).to_body()
        return messages.PATCHED, (await self._dispatcher.apply_patch(args)).to_body()

    async def _send(self, identity: bytes, message: Envelope) -> None:
        try:
            await self._socket.send_multipart([identity, *self._codec.serialize(message)])
        except zmq.ZMQError as exc:
            log.warning("could not answer a gateway: %s", exc)
