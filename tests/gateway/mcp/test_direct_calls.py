"""Direct tool calls (docs/modes.md#direct-tool-calls) answer exactly as the SDK would.

The SDK's own server is run over memory streams beside :class:`DirectCalls`, both around
the same handlers on the dispatcher's in-process twin (real PTYs, no worker processes), and
the same requests are put to both, on a handshake connection and on a 2026-07-28 one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage
from mcp_types.version import LATEST_MODERN_VERSION

from tests.support.direct_calls import ENVELOPE, without_timing
from tests.support.in_process import InProcessDispatcher
from zodex_gateway.mcp.direct_calls import MODERN, DirectCalls
from zodex_gateway.mcp.server import ToolHandlers, server_for

pytestmark = pytest.mark.timeout(30)

Json = dict[str, Any]
HANDSHAKE = "2025-06-18"


class SdkConnection:
    """Raw JSON-RPC to the SDK's server over memory streams."""

    def __init__(self, send: Any, receive: Any) -> None:
        self._send = send
        self._receive = receive

    async def request(self, message: Json) -> Json:
        parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        await self._send.send(SessionMessage(parsed))
        with anyio.fail_after(10):
            while True:
                answer: SessionMessage = await self._receive.receive()
                dumped: Json = answer.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                if dumped.get("id") == message["id"]:
                    return json.loads(json.dumps(dumped))


@asynccontextmanager
async def sdk_and_direct(handlers: ToolHandlers) -> AsyncIterator[tuple[SdkConnection, DirectCalls]]:
    server = server_for(handlers, start_directory="/")
    to_server, server_reads = anyio.create_memory_object_stream[Any](16)
    server_writes, from_server = anyio.create_memory_object_stream[Any](16)
    async with from_server, anyio.create_task_group() as tasks:
        tasks.start_soon(server.run, server_reads, server_writes, server.create_initialization_options())
        try:
            yield SdkConnection(to_server, from_server), DirectCalls(server, handlers)
        finally:
            await to_server.aclose()  # the server ends at the end of its input


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    path = tmp_path / "wd"
    path.mkdir()
    return str(path.resolve())


def calls(workdir: str) -> list[tuple[str, Json]]:
    """One of each kind of answer: a finished command, a tool error, a refused patch."""
    return [
        ("exec_command", {"cmd": "printf 'héllo\\n'; exit 3", "workdir": workdir}),
        ("exec_command", {"cmd": "true", "workdir": "relative/dir"}),
        ("write_stdin", {"session_handle": "no-such-handle"}),
        ("apply_patch", {"patch": "not a patch", "workdir": workdir}),
        ("no_such_tool", {}),
    ]


async def both_answers(
    sdk: SdkConnection, direct: DirectCalls, message: Json, version: str
) -> tuple[Json, Json]:
    accepted = direct.accept(message, version)
    assert accepted is not None, f"direct calls refused {message}"
    ours = json.loads(json.dumps(await direct.answer(accepted)))
    theirs = await sdk.request(message)
    return without_timing(ours), without_timing(theirs)


async def test_on_a_handshake_connection_answers_equal_the_sdks(
    twin: InProcessDispatcher, workdir: str
) -> None:
    async with sdk_and_direct(ToolHandlers(twin)) as (sdk, direct):
        init = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        answer = await sdk.request({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        assert answer["result"]["protocolVersion"] == HANDSHAKE
        for number, (name, arguments) in enumerate(calls(workdir), start=1):
            message = {
                "jsonrpc": "2.0",
                "id": number,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
            ours, theirs = await both_answers(sdk, direct, message, HANDSHAKE)
            assert ours == theirs


async def test_on_a_2026_connection_answers_equal_the_sdks(twin: InProcessDispatcher, workdir: str) -> None:
    async with sdk_and_direct(ToolHandlers(twin)) as (sdk, direct):
        for number, (name, arguments) in enumerate(calls(workdir), start=1):
            params = {"name": name, "arguments": arguments, "_meta": ENVELOPE}
            message = {"jsonrpc": "2.0", "id": f"r{number}", "method": "tools/call", "params": params}
            ours, theirs = await both_answers(sdk, direct, message, MODERN)
            assert ours == theirs
            assert ours["result"]["resultType"] == "complete"
            assert types.SERVER_INFO_META_KEY in ours["result"]["_meta"]


@pytest.mark.parametrize("modern", [False, True], ids=["handshake", "2026"])
async def test_a_handler_that_raises_is_answered_as_the_sdk_answers_it(
    failing_twin: InProcessDispatcher, tmp_path: Path, modern: bool
) -> None:
    async with sdk_and_direct(ToolHandlers(failing_twin)) as (sdk, direct):
        version = MODERN if modern else HANDSHAKE
        if not modern:
            init = {
                "protocolVersion": HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            }
            await sdk.request({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        params: Json = {"name": "exec_command", "arguments": {"cmd": "true", "workdir": str(tmp_path)}}
        if modern:
            params["_meta"] = ENVELOPE
        ours, theirs = await both_answers(
            sdk, direct, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}, version
        )
        assert ours == theirs
        assert "error" in ours and "result" not in ours


def tools_call(**changes: Any) -> Json:
    message: Json = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "exec_command", "arguments": {"cmd": "true", "workdir": "/"}},
    }
    message.update(changes)
    return message


LEFT_TO_THE_SDK: dict[str, tuple[Callable[[], Json], str | None]] = {
    "not yet initialized": (tools_call, None),
    "another method": (lambda: tools_call(method="tools/list"), HANDSHAKE),
    "jsonrpc 1.0": (lambda: tools_call(jsonrpc="1.0"), HANDSHAKE),
    "a boolean id": (lambda: tools_call(id=True), HANDSHAKE),
    "a float id": (lambda: tools_call(id=1.5), HANDSHAKE),
    "no id": (lambda: {k: v for k, v in tools_call().items() if k != "id"}, HANDSHAKE),
    "an extra member": (lambda: tools_call(extra=1), HANDSHAKE),
    "params not an object": (lambda: tools_call(params=["exec_command"]), HANDSHAKE),
    "no tool name": (lambda: tools_call(params={"arguments": {}}), HANDSHAKE),
    "arguments not an object": (
        lambda: tools_call(params={"name": "exec_command", "arguments": "x"}),
        HANDSHAKE,
    ),
    "an envelope on a handshake connection": (
        lambda: tools_call(params={"name": "exec_command", "arguments": {}, "_meta": ENVELOPE}),
        HANDSHAKE,
    ),
    "an unknown handshake version": (tools_call, "1999-01-01"),
    "no envelope on a 2026 connection": (tools_call, MODERN),
    "an unsupported 2026 version": (
        lambda: tools_call(
            params={"name": "x", "_meta": {**ENVELOPE, types.PROTOCOL_VERSION_META_KEY: "2099-01-01"}}
        ),
        MODERN,
    ),
    "an envelope without capabilities": (
        lambda: tools_call(
            params={"name": "x", "_meta": {types.PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION}}
        ),
        MODERN,
    ),
}


@pytest.mark.parametrize("case", sorted(LEFT_TO_THE_SDK))
def test_what_the_sdk_would_refuse_is_left_to_it(case: str) -> None:
    make, version = LEFT_TO_THE_SDK[case]
    direct = DirectCalls(server_for(ToolHandlers(object())), ToolHandlers(object()))  # type: ignore[arg-type]
    assert direct.accept(make(), version) is None


def test_a_plain_call_is_taken_on_both_eras() -> None:
    direct = DirectCalls(server_for(ToolHandlers(object())), ToolHandlers(object()))  # type: ignore[arg-type]
    taken = direct.accept(tools_call(), HANDSHAKE)
    assert taken is not None and taken.version == HANDSHAKE and taken.params.name == "exec_command"
    modern = tools_call(params={"name": "exec_command", "arguments": {}, "_meta": ENVELOPE})
    taken = direct.accept(modern, MODERN)
    assert taken is not None and taken.version == LATEST_MODERN_VERSION


def test_a_server_with_a_middleware_of_its_own_leaves_every_call_to_the_sdk() -> None:
    class Observing:
        async def __call__(self, ctx: Any, call_next: Any) -> Any:
            return await call_next(ctx)

    server = server_for(ToolHandlers(object()))  # type: ignore[arg-type]
    server.middleware.append(Observing())  # type: ignore[arg-type]
    direct = DirectCalls(server, ToolHandlers(object()))  # type: ignore[arg-type]
    assert direct.accept(tools_call(), HANDSHAKE) is None
