"""Answers for JSON-RPC input the MCP SDK cannot parse (docs/tools.md#errors).

The SDK drops a stdio line that is not a JSON-RPC message without a word, and its JSON
parser refuses a lone UTF-16 surrogate escape (``"\\ud800"``) as if the whole message were
not JSON. The stdio transport asks :mod:`zodex_gateway.mcp.jsonrpc_rules` instead and
writes its answer.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from zodex_gateway.mcp.jsonrpc_rules import Json, reply_to_idless, reply_to_invalid, reply_to_unparsable

log = logging.getLogger("zodex.gateway")


def reply_to_idless_request(item: SessionMessage) -> Json | None:
    """The answer to a request the SDK read as a notification: its id was not a string or an
    integer (``true``, ``null``, ``1.5``, an object), or it had none. The SDK would drop it
    unanswered; a notification's method always starts with ``notifications/``."""
    message = item.message
    return reply_to_idless(message.method) if isinstance(message, types.JSONRPCNotification) else None


def reply_to_rejected(exc: Exception) -> Json | None:
    """The answer to a frame the SDK's stdio reader turned into ``exc`` instead of a message."""
    if not isinstance(exc, ValidationError):
        return None
    errors = exc.errors()
    first = errors[0] if errors else None
    if first is not None and first["type"] == "json_invalid" and isinstance(first["input"], str):
        return reply_to_unparsable(first["input"])
    # The union's "missing field" errors carry the whole message: take its id from there.
    message = next((e["input"] for e in errors if isinstance(e["input"], dict)), None)
    return reply_to_invalid(message)


class AnsweringReadStream:
    """The stdio read stream the server consumes: frames the SDK could not parse are
    answered on ``write`` (the SDK would drop them unanswered) instead of being passed on."""

    def __init__(
        self, inner: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage]
    ) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> Any:
        # The dispatcher restores the sender's context from here (mcp's context streams).
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                reply = reply_to_idless_request(item)
                if reply is None:
                    return item
                await self._write.send(
                    SessionMessage(types.jsonrpc_message_adapter.validate_python(reply, by_name=False))
                )
                continue
            reply = reply_to_rejected(item)
            if reply is None:
                log.warning("stdio transport error: %r", item)
                return item
            await self._write.send(
                SessionMessage(types.jsonrpc_message_adapter.validate_python(reply, by_name=False))
            )

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> AnsweringReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringReadStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None
