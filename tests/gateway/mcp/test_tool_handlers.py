"""The MCP layer (docs/tools.md#annotations) over the in-process twin of the dispatcher: no sockets, no workers.

The twin's reaper handles SIGCHLD with ``waitpid(-1)`` in this process, so every test
closes it and none starts another subprocess.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from tests.support.in_process import InProcessDispatcher
from zodex_gateway.mcp.calls import Outcome, ToolCall
from zodex_gateway.mcp.mode import Mode
from zodex_gateway.mcp.server import server_for
from zodex_gateway.mcp.tool_dispatcher import ToolDispatcher
from zodex_protocol.errors import ErrorCode, ProtocolError

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def handlers(twin: InProcessDispatcher) -> ToolDispatcher:
    return ToolDispatcher(twin)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "wd"
    path.mkdir()
    return path.resolve()


async def call(handlers: ToolDispatcher, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
    return await handlers.call_tool(None, types.CallToolRequestParams(name=name, arguments=arguments))  # type: ignore[arg-type]


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def session(handlers: ToolDispatcher, name: str, **args: Any) -> dict[str, Any]:
    """A session result: structuredContent and one text block holding the same JSON."""
    result = await call(handlers, name, args)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    assert json.loads(text_of(result)) == result.structured_content
    assert None not in result.structured_content.values(), "optional fields are omitted, never null"
    return dict(result.structured_content)


async def error(handlers: ToolDispatcher, name: str, arguments: dict[str, Any] | None) -> str:
    result = await call(handlers, name, arguments)
    assert result.is_error
    assert result.structured_content is None
    text = text_of(result)
    assert text and "\n" not in text, "one line"
    return text


async def test_exec_result_is_structured_and_mirrored_as_text(
    handlers: ToolDispatcher, workdir: Path
) -> None:
    r = await session(handlers, "exec_command", cmd="echo héllo; pwd", workdir=str(workdir))
    assert r["status"] == "exited" and r["exit_code"] == 0 and r["termination_reason"] == "exit"
    assert r["output"] == f"héllo\n{workdir}\n"
    assert r["cwd"] == str(workdir)
    assert r["summary"].startswith("exited 0 after ")
    assert "session_handle" not in r and "signal" not in r
    raw = await call(handlers, "exec_command", {"cmd": "echo héllo", "workdir": str(workdir)})
    assert "héllo" in text_of(raw), "text is plain UTF-8 JSON, not \\u escapes"


async def test_running_session_typed_into_then_killed(handlers: ToolDispatcher, workdir: Path) -> None:
    r = await session(
        handlers, "exec_command", cmd="read x; echo got $x; sleep 300", workdir=str(workdir), yield_time_ms=50
    )
    assert r["status"] == "running"
    handle = r["session_handle"]
    assert r["summary"].endswith(f"; use session_handle {handle} to poll")
    assert "exit_code" not in r and "termination_reason" not in r
    r = await session(handlers, "write_stdin", session_handle=handle, chars="hi\n", yield_time_ms=2000)
    out = r["output"]
    for _ in range(10):  # each poll returns once new output has settled
        if "got hi" in out:
            break
        r = await session(handlers, "write_stdin", session_handle=handle, yield_time_ms=2000)
        out += r["output"]
    assert "got hi\n" in out and r["status"] == "running"
    killed = await session(handlers, "write_stdin", session_handle=handle, kill_process=True, chars="ignored")
    assert (killed["status"], killed["termination_reason"], killed["exit_code"]) == ("exited", "killed", -1)
    assert killed["summary"].startswith("killed after ")
    again = await session(handlers, "write_stdin", session_handle=handle, yield_time_ms=50)
    assert (again["status"], again["termination_reason"], again["output"]) == ("exited", "killed", "")


async def test_bad_workdir_messages_in_order(handlers: ToolDispatcher, tmp_path: Path) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    missing = tmp_path / "missing"
    for tool, extra in (("exec_command", {"cmd": "touch made"}), ("apply_patch", {"patch": "garbage"})):
        for bad in ("relative/dir", "~", ""):
            assert (
                await error(handlers, tool, {**extra, "workdir": bad})
                == f"workdir must be an absolute path: {bad}"
            )
        assert (
            await error(handlers, tool, {**extra, "workdir": str(missing)})
            == f"workdir does not exist: {missing}"
        )
        assert (
            await error(handlers, tool, {**extra, "workdir": str(a_file)})
            == f"workdir is not a directory: {a_file}"
        )
    # The workdir is checked before the command.
    assert (
        await error(handlers, "exec_command", {"cmd": "", "workdir": "rel"})
        == "workdir must be an absolute path: rel"
    )
    for blank in ("", "  "):
        assert (
            await error(handlers, "exec_command", {"cmd": blank, "workdir": str(tmp_path)})
            == "cmd must not be empty"
        )
    assert not missing.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"], "nothing spawned, nothing written"


async def test_unknown_handles_and_tools(handlers: ToolDispatcher, workdir: Path) -> None:
    for handle in ("abc", "aaaaaaa1-0123456789", ""):
        assert (
            await error(handlers, "write_stdin", {"session_handle": handle})
            == f"Unknown session handle: {handle}"
        )
    r = await session(handlers, "exec_command", cmd="sleep 300", workdir=str(workdir), yield_time_ms=50)
    stranger = r["session_handle"][:-10] + "0000000000"  # a known worker, a token never issued
    assert (
        await error(handlers, "write_stdin", {"session_handle": stranger})
        == f"Unknown session handle: {stranger}"
    )
    await session(handlers, "write_stdin", session_handle=r["session_handle"], kill_process=True)
    assert await error(handlers, "no_such_tool", {}) == "Unknown tool: no_such_tool"
    assert (await error(handlers, "set_agent_alias", {"alias": "x"})).startswith(
        "set_agent_alias needs to know which conversation is calling"
    )
    for mode in (Mode.SPRITE, Mode.FLEET):
        remote = ToolDispatcher(handlers.workers.dispatcher, mode=mode)
        assert await error(remote, "set_agent_alias", {"alias": "x"}) == "Unknown tool: set_agent_alias"


async def test_wrong_argument_types(handlers: ToolDispatcher, workdir: Path) -> None:
    wd = str(workdir)
    cases: list[tuple[str, dict[str, Any] | None, str]] = [
        ("exec_command", None, "cmd is required"),
        ("exec_command", {"workdir": wd}, "cmd is required"),
        ("exec_command", {"cmd": "true"}, "workdir is required"),
        ("exec_command", {"cmd": ["ls"], "workdir": wd}, "cmd must be a string"),
        (
            "exec_command",
            {"cmd": "true", "workdir": wd, "yield_time_ms": "5"},
            "yield_time_ms must be an integer",
        ),
        ("exec_command", {"cmd": "true", "workdir": wd, "timeout_ms": -1}, "timeout_ms must be ≥ 0"),
        ("write_stdin", None, "session_handle is required"),
        ("write_stdin", {"session_handle": "h", "kill_process": "yes"}, "kill_process must be a boolean"),
        ("write_stdin", {"session_handle": "h", "chars": 3}, "chars must be a string"),
        ("apply_patch", {"workdir": wd}, "patch is required"),
        ("apply_patch", {"patch": "x", "workdir": 1}, "workdir must be a string"),
    ]
    for tool, arguments, message in cases:
        assert await error(handlers, tool, arguments) == message, (tool, arguments)
    assert list(workdir.iterdir()) == []


async def test_apply_patch_success_and_failure_text(handlers: ToolDispatcher, workdir: Path) -> None:
    (workdir / "keep.txt").write_text("one\ntwo\n")
    ok = await call(handlers, "apply_patch", {"workdir": str(workdir), "patch": (
        "*** Begin Patch\n*** Add File: new.txt\n+hello\n"
        "*** Update File: keep.txt\n@@\n one\n-two\n+TWO\n*** End Patch"
    )})  # fmt: skip
    assert not ok.is_error and ok.structured_content is None
    assert text_of(ok) == (
        f"Success. Updated the following files:\nA {workdir / 'new.txt'}\nM {workdir / 'keep.txt'}"
    )
    assert (workdir / "new.txt").read_text() == "hello\n"
    partial = await call(handlers, "apply_patch", {"workdir": str(workdir), "patch": (
        "*** Begin Patch\n*** Add File: more.txt\n+x\n"
        "*** Update File: keep.txt\n@@\n-not there\n+y\n*** End Patch"
    )})  # fmt: skip
    assert partial.is_error
    text = text_of(partial)
    assert text.startswith("apply_patch partially applied: 1 of 2 file operations succeeded.\n"), text
    assert f"Update File {workdir / 'keep.txt'}" in text
    assert (workdir / "more.txt").exists() and (workdir / "keep.txt").read_text() == "one\nTWO\n"
    invalid = await call(handlers, "apply_patch", {"workdir": str(workdir), "patch": "*** Begin Patch\nnope"})
    assert invalid.is_error and text_of(invalid).startswith("Invalid patch")


async def test_list_tools_and_read_only_hint(handlers: ToolDispatcher) -> None:
    listed = (await handlers.list_tools(None, None)).tools  # type: ignore[arg-type]
    assert [t.name for t in listed] == ["exec_command", "write_stdin", "apply_patch", "set_agent_alias"]
    for mode in (Mode.SPRITE, Mode.FLEET):  # the fleet lists Sprite's tools (docs/fleet.md#gateways)
        remote = (await ToolDispatcher(handlers.workers.dispatcher, mode=mode).list_tools(None, None)).tools  # type: ignore[arg-type]
        assert [t.name for t in remote] == ["exec_command", "write_stdin", "apply_patch"]
    for tool in listed:
        assert tool.annotations is not None
        assert (tool.annotations.read_only_hint, tool.annotations.destructive_hint) == (True, False)
        assert tool.annotations.open_world_hint is False
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description"), (tool.name, name)
            assert not any(word in name for word in ("agent", "conversation", "runtime"))
    assert listed[0].output_schema is not None and listed[2].output_schema is None
    flipped = (
        await ToolDispatcher(handlers.workers.dispatcher, read_only_hint=False).list_tools(None, None)
    ).tools  # type: ignore[arg-type]
    assert [t.annotations.read_only_hint for t in flipped if t.annotations] == [False, False, False, False]
    assert all(t.annotations and t.annotations.destructive_hint is False for t in flipped)


def test_each_mode_gives_its_instructions(handlers: ToolDispatcher) -> None:
    """Local names its start directory; Sprite and the fleet give Sprite's instructions with
    the workspace (docs/sprite.md#the-service, docs/fleet.md#gateways)."""
    said = {
        mode: server_for(
            ToolDispatcher(handlers.workers.dispatcher, mode=mode), start_directory="/w"
        ).instructions
        for mode in Mode
    }
    assert said[Mode.LOCAL] is not None and "Suggested first workdir: /w" in said[Mode.LOCAL]
    assert said[Mode.LOCAL].startswith("Zodex gives you a real machine")
    for mode in (Mode.SPRITE, Mode.FLEET):
        assert said[mode] is not None and said[mode].startswith(
            "Zodex Sprite gives you remote execution tools"
        )
        assert "Default workdir: /w" in said[mode]
    assert [mode.value for mode in Mode] == ["local", "sprite", "fleet"]


class FailingDispatcher:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def exec_command(self, args: dict[str, Any], **_tag: Any) -> Any:
        raise self.exc

    write_stdin = apply_patch = exec_command

    async def close(self) -> None:
        pass


async def test_protocol_failures_and_timeouts_become_one_line_errors() -> None:
    lost = ToolDispatcher(FailingDispatcher(ProtocolError(ErrorCode.WORKER_LOST, "the worker went away")))
    assert await error(lost, "exec_command", {}) == "the worker went away"
    slow = ToolDispatcher(FailingDispatcher(TimeoutError()))
    assert (
        await error(slow, "write_stdin", {}) == "write_stdin got no answer from its worker in time; try again"
    )


async def test_a_call_reaches_its_tool_with_the_sdk_request_context(
    handlers: ToolDispatcher, workdir: Path
) -> None:
    """Through the SDK's own client and server, a tool handler is given the request's SDK
    context (the way to the client while the call runs) and its ``_meta``, and the
    worker tools answer as without it."""
    from mcp import Client

    seen: list[ToolCall] = []
    run = handlers.workers.run

    async def recording(call: ToolCall) -> Outcome:
        seen.append(call)
        return await run(call)

    handlers.workers.run = recording  # type: ignore[method-assign]
    async with Client(server_for(handlers)) as client:
        result = await client.call_tool(
            "exec_command", {"cmd": "echo through", "workdir": str(workdir)}, meta={"openai/session": "s1"}
        )
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["output"].strip() == "through"
    [call] = seen
    assert call.ctx is not None and call.ctx.method == "tools/call" and call.ctx.request_id is not None
    assert call.ctx.meta is not None and call.ctx.meta.get("openai/session") == "s1"
    assert call.args == {"cmd": "echo through", "workdir": str(workdir)}


async def test_a_call_resolves_its_workdir_once(
    handlers: ToolDispatcher, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """History, routing and the session's first cwd share one real path of the workdir
    (docs/benchmarks.md#where-the-time-goes): the twin runs the worker's part in process."""
    link = workdir.parent / "link"
    link.symlink_to(workdir)
    resolved: list[str] = []
    real_path = os.path.realpath

    def counted(path: Any, **kwargs: Any) -> str:
        resolved.append(str(path))
        return real_path(path, **kwargs)

    monkeypatch.setattr(os.path, "realpath", counted)
    result = await session(handlers, "exec_command", cmd="true", workdir=str(link))
    assert result["cwd"] == str(workdir)
    assert resolved == [str(link)]
    resolved.clear()
    assert "workdir does not exist" in await error(
        handlers, "exec_command", {"cmd": "true", "workdir": f"{link}/no"}
    )
    assert resolved == []
