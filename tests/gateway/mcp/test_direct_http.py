"""Direct tool calls over HTTP (docs/modes.md#direct-tool-calls) answer exactly as the SDK's
streamable HTTP app would, and leave to it every request it would not dispatch.

Two guarded MCP apps around the same handlers on the dispatcher's in-process twin (real
PTYs, no worker processes): one answers plain calls directly, the other leaves everything
to the SDK. Each request goes to both, in process through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_types.version import LATEST_MODERN_VERSION
from starlette.types import ASGIApp, Message

from tests.support.direct_calls import ENVELOPE, without_timing
from tests.support.in_process import InProcessDispatcher
from zodex_gateway.mcp.direct_calls import Accepted, DirectCalls
from zodex_gateway.mcp.http_guard import GuardedMcpApp
from zodex_gateway.mcp.server import ToolHandlers, server_for

pytestmark = pytest.mark.timeout(30)

TOKEN = "t0k3n" * 12 + "abcd"


class CountingCalls(DirectCalls):
    answered = 0

    async def answer(self, call: Accepted, request: Any = None) -> dict[str, Any]:
        CountingCalls.answered += 1
        return await super().answer(call, request)


@asynccontextmanager
async def lifespan(app: ASGIApp) -> AsyncIterator[None]:
    """Runs the app's lifespan (the SDK's session manager) around the block."""
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()

    async def send(message: Message) -> None:
        await outbox.put(message)

    task = asyncio.create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, send)
    )
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task


class Pair:
    def __init__(self, sdk: httpx.AsyncClient, direct: httpx.AsyncClient) -> None:
        self.sdk = sdk
        self.direct = direct

    async def post(self, body: Any, headers: dict[str, str]) -> tuple[httpx.Response, httpx.Response]:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        before = CountingCalls.answered
        theirs = await self.sdk.post("/mcp", content=content, headers=headers)
        assert CountingCalls.answered == before, "the SDK-only app answered directly"
        ours = await self.direct.post("/mcp", content=content, headers=headers)
        return ours, theirs


@asynccontextmanager
async def pair(handlers: ToolHandlers) -> AsyncIterator[Pair]:
    sdk_app = GuardedMcpApp(server_for(handlers), TOKEN, "127.0.0.1")
    direct_server = server_for(handlers)
    direct_app = GuardedMcpApp(
        direct_server, TOKEN, "127.0.0.1", direct=CountingCalls(direct_server, handlers)
    )
    base = {"base_url": "http://127.0.0.1:8123", "headers": {"X-Zodex-Local-Token": TOKEN}}
    async with (
        lifespan(sdk_app),
        lifespan(direct_app),
        httpx.AsyncClient(transport=httpx.ASGITransport(sdk_app), **base) as sdk,  # type: ignore[arg-type]
        httpx.AsyncClient(transport=httpx.ASGITransport(direct_app), **base) as direct,  # type: ignore[arg-type]
    ):
        yield Pair(sdk, direct)


def request(name: str, arguments: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_meta": ENVELOPE}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def headers_for(name: str) -> dict[str, str]:
    """What a 2026-07-28 client sends with a tools/call."""
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }


def comparable(response: httpx.Response) -> tuple[int, str, Any]:
    return response.status_code, response.headers["content-type"], without_timing(response.json())


async def test_plain_calls_are_answered_directly_and_as_the_sdk_answers_them(
    twin: InProcessDispatcher, tmp_path: Path
) -> None:
    workdir = str(tmp_path)
    calls = [
        ("exec_command", {"cmd": "printf 'h\\u00e9llo\\n'; exit 3", "workdir": workdir}),
        ("exec_command", {"cmd": "true", "workdir": "relative"}),
        ("write_stdin", {"session_handle": "nope"}),
        ("apply_patch", {"patch": "not a patch", "workdir": workdir}),
        ("no_such_tool", {}),
    ]
    async with pair(ToolHandlers(twin)) as both:
        for number, (name, arguments) in enumerate(calls, start=1):
            before = CountingCalls.answered
            ours, theirs = await both.post(request(name, arguments, number), headers_for(name))
            assert CountingCalls.answered == before + 1, f"{name} was not answered directly"
            assert comparable(ours) == comparable(theirs)
            assert ours.status_code == 200


async def test_a_handler_that_raises_gets_the_sdks_error_and_status(
    failing_twin: InProcessDispatcher, tmp_path: Path
) -> None:
    async with pair(ToolHandlers(failing_twin)) as both:
        message = request("exec_command", {"cmd": "true", "workdir": str(tmp_path)})
        ours, theirs = await both.post(message, headers_for("exec_command"))
        assert comparable(ours) == comparable(theirs)
        assert "error" in ours.json()


def changed(headers: dict[str, str], **changes: str | None) -> dict[str, str]:
    result = {**headers}
    for key, value in changes.items():
        name = key.replace("_", "-")
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


PLAIN = headers_for("exec_command")
LEFT_TO_THE_SDK: dict[str, tuple[dict[str, str], Any]] = {
    "no protocol version header": (changed(PLAIN, **{"MCP_Protocol_Version": None}), None),
    "a handshake version header": (changed(PLAIN, **{"MCP_Protocol_Version": "2025-06-18"}), None),
    "an unsupported version header": (changed(PLAIN, **{"MCP_Protocol_Version": "2099-01-01"}), None),
    "a text body": (changed(PLAIN, Content_Type="text/plain"), None),
    "no JSON accepted": (changed(PLAIN, Accept="text/event-stream"), None),
    "a method header that disagrees": (changed(PLAIN, Mcp_Method="tools/list"), None),
    "a name header that disagrees": (changed(PLAIN, Mcp_Name="write_stdin"), None),
    "no envelope": (
        PLAIN,
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "exec_command"}},
    ),
    "not JSON": (PLAIN, b"{not json"),
    "a batch": (PLAIN, [{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}]),
    "arguments not an object": (
        PLAIN,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "exec_command", "arguments": 5, "_meta": ENVELOPE},
        },
    ),
}


@pytest.mark.parametrize("case", sorted(LEFT_TO_THE_SDK))
async def test_what_the_sdk_would_refuse_is_left_to_it(
    twin: InProcessDispatcher, tmp_path: Path, case: str
) -> None:
    headers, body = LEFT_TO_THE_SDK[case]
    if body is None:
        body = request("exec_command", {"cmd": "touch ran", "workdir": str(tmp_path)})
    async with pair(ToolHandlers(twin)) as both:
        before = CountingCalls.answered
        ours, theirs = await both.post(body, headers)
        assert CountingCalls.answered == before, "answered directly"
        assert ours.status_code == theirs.status_code
        if theirs.headers.get("content-type") == "application/json":
            assert comparable(ours) == comparable(theirs)
        else:
            assert ours.content == theirs.content


async def test_a_doubled_routing_header_is_left_to_the_sdk(twin: InProcessDispatcher, tmp_path: Path) -> None:
    body = json.dumps(request("exec_command", {"cmd": "true", "workdir": str(tmp_path)})).encode()
    doubled = [(k, v) for k, v in PLAIN.items()] + [("Mcp-Method", "tools/call")]
    async with pair(ToolHandlers(twin)) as both:
        before = CountingCalls.answered
        ours = await both.direct.post("/mcp", content=body, headers=doubled)
        theirs = await both.sdk.post("/mcp", content=body, headers=doubled)
        assert CountingCalls.answered == before
        assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())
        assert ours.status_code == 400


class DeclaringHandlers(ToolHandlers):
    """exec_command's schema mirrors ``workdir`` into an ``Mcp-Param-Workdir`` header."""

    def input_schema(self, name: str) -> Any:
        schema = super().input_schema(name)
        if name != "exec_command" or schema is None:
            return schema
        properties = {
            **schema["properties"],
            "workdir": {**schema["properties"]["workdir"], "x-mcp-header": "Workdir"},
        }
        return {**schema, "properties": properties}


async def test_a_declared_param_header_is_checked_as_the_sdk_checks_it(
    twin: InProcessDispatcher, tmp_path: Path
) -> None:
    message = request("exec_command", {"cmd": "echo hi", "workdir": str(tmp_path)})
    async with pair(DeclaringHandlers(twin)) as both:
        before = CountingCalls.answered
        ours, theirs = await both.post(message, {**PLAIN, "Mcp-Param-Workdir": "/somewhere/else"})
        assert CountingCalls.answered == before, "a disagreeing header was answered directly"
        assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())
        assert ours.status_code == 400
        ours, theirs = await both.post(message, {**PLAIN, "Mcp-Param-Workdir": str(tmp_path)})
        assert CountingCalls.answered == before + 1
        assert comparable(ours) == comparable(theirs)
        assert ours.json()["result"]["structuredContent"]["output"] == "hi\n"
