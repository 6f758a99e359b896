"""The stdio wire with plain ``tools/call`` requests answered directly (zodex_gateway.mcp.direct_calls).

Sits between the wire (:mod:`.stdio_pipes`) and the SDK's ``stdio_server``: every line goes
to the SDK except a ``tools/call`` the SDK would accept, which is answered here, in a task of
its own, on the same writer. Whether the SDK would accept one depends on the connection, so
this follows it as the SDK decides it:

- the client's first request fixes the connection's era, as the SDK's dual-era loop reads it
  (a 2026-07-28 envelope on anything but ``initialize``: modern; else the handshake era).
  That request always goes to the SDK;
- on a handshake connection, calls are taken only once the SDK has answered ``initialize``
  with a result, at the protocol version it answered with; another ``initialize`` stops
  taking them until it is answered;
- ``notifications/cancelled`` for a call taken here cancels it and nothing is written for
  it, as the SDK does; the notification still reaches the SDK;
- at the end of input, calls still running are cancelled and answered ``Connection closed``
  (-32000), as the SDK answers its own, before the SDK sees the end.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Final

import mcp_types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp_types import CONNECTION_CLOSED
from pydantic import ValidationError

from zodex_gateway.mcp.direct_calls import INVALID_RESULT, MODERN, Accepted, DirectCalls
from zodex_gateway.serve.stdio_pipes import LineReader, LineWriter

_CLOSED: Final = {"code": CONNECTION_CLOSED, "message": "Connection closed"}
_INVALID_RESULT: Final = {"code": types.INTERNAL_ERROR, "message": INVALID_RESULT}
# A \uD800-\uDFFF escape: the SDK's parser refuses the line (zodex_gateway.mcp.jsonrpc_input).
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # the SDK's parser refuses NaN and Infinity


def _encode(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


class DirectStdio:
    def __init__(self, reader: LineReader, writer: LineWriter, calls: DirectCalls) -> None:
        self._reader = reader
        self._writer = writer
        self._calls = calls
        self._era_decided = False
        # The version calls are taken at: MODERN, a handshake version, or None (not yet).
        self._version: str | None = None
        self._pending_initialize: set[int | str] = set()
        self._running: dict[int | str, asyncio.Task[None]] = {}
        self._cancelled_by_peer: set[asyncio.Task[None]] = set()
        self.sdk_writer = _WatchingWriter(self)

    # -- the SDK's stdin: every line but the calls taken here ------------------------

    def __aiter__(self) -> DirectStdio:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self._reader.__anext__()
            except StopAsyncIteration:
                await self._close_running()
                raise
            if not self._took(line):
                return line

    def _took(self, line: str) -> bool:
        """Follow the connection through ``line``; True if it was a call taken here."""
        if _SURROGATE_ESCAPE.search(line):
            return False  # refused by the SDK's parser: no message, nothing to follow
        try:
            message = json.loads(line, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            return False
        if not isinstance(message, dict):
            return False
        if not self._era_decided:
            self._decide_era(line, message)
            return False
        method = message.get("method")
        if method == "notifications/cancelled":
            self._peer_cancelled(message.get("params"))
        elif method == "initialize" and self._version != MODERN:
            request_id = message.get("id")
            if isinstance(request_id, int | str) and not isinstance(request_id, bool):
                self._pending_initialize.add(coerce_request_id(request_id))
                self._version = None  # the SDK may settle on another version
        accepted = self._calls.accept(message, self._version)
        if accepted is None:
            return False
        key = coerce_request_id(accepted.request_id)
        task = asyncio.create_task(self._serve(accepted))
        self._running[key] = task
        task.add_done_callback(lambda done: self._finished(key, done))
        return True

    def _decide_era(self, line: str, message: dict[str, Any]) -> None:
        """The SDK's reading of the first request it dispatches (mcp.server.runner)."""
        try:
            parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValidationError:
            return  # answered as an error by the SDK: decides nothing
        if not isinstance(parsed, types.JSONRPCRequest):
            return
        self._era_decided = True
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if (
            parsed.method != "initialize"
            and isinstance(meta, dict)
            and types.PROTOCOL_VERSION_META_KEY in meta
        ):
            self._version = MODERN
        elif parsed.method == "initialize":
            self._pending_initialize.add(coerce_request_id(parsed.id))

    def _peer_cancelled(self, params: object) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            return
        task = self._running.get(coerce_request_id(request_id))
        if task is not None:
            self._cancelled_by_peer.add(task)
            task.cancel()

    def _finished(self, key: int | str, task: asyncio.Task[None]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
        self._cancelled_by_peer.discard(task)

    async def _serve(self, call: Accepted) -> None:
        try:
            response = await self._calls.answer(call)
        except asyncio.CancelledError:
            if asyncio.current_task() not in self._cancelled_by_peer:
                await self._write({"jsonrpc": "2.0", "id": call.request_id, "error": _CLOSED})
            raise
        await self._write(response)

    async def _write(self, message: dict[str, Any]) -> None:
        try:
            text = _encode(message)
        except ValueError:  # a value JSON cannot carry
            text = _encode({"jsonrpc": "2.0", "id": message["id"], "error": _INVALID_RESULT})
        try:
            await self._writer.write(text)
            await self._writer.flush()
        except OSError:
            pass  # the client closed its end: the SDK's reader sees the end of input

    async def _close_running(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    # -- the SDK's stdout ----------------------------------------------------------------

    def _sdk_wrote(self, text: str) -> None:
        """Watch the SDK's answers to ``initialize`` on a handshake connection."""
        if not self._pending_initialize:
            return
        try:
            message = json.loads(text)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        request_id = message.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            return
        key = coerce_request_id(request_id)
        if key not in self._pending_initialize:
            return
        self._pending_initialize.discard(key)
        result = message.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, str) and not self._pending_initialize:
            self._version = version


class _WatchingWriter:
    """The writer the SDK is given: the wire's, telling :class:`DirectStdio` what it wrote."""

    def __init__(self, owner: DirectStdio) -> None:
        self._owner = owner

    async def write(self, text: str) -> None:
        self._owner._sdk_wrote(text)
        await self._owner._writer.write(text)

    async def flush(self) -> None:
        await self._owner._writer.flush()
