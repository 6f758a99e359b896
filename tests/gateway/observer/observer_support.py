"""A history filled through the store's public methods, as the runtime would fill it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zodex_gateway.history import FileChange, HistoryStore

T0 = 1_700_000_000.0
BEARER = "observer-bearer-" + "b" * 32
IDENTITY_KEY_A = "mcp-session-token-AAAA-" + "a" * 24
IDENTITY_KEY_B = "mcp-session-token-BBBB-" + "c" * 24
RUNTIME_ID = "rt-test-1"
# In-process clients must still name a loopback listener in Host (the observer's Host rule).
BASE_URL = "http://127.0.0.1:4321"


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now


@dataclass
class Seeded:
    agent_a: str
    agent_b: str
    exec_running: str  # agent A, still running, polled twice, then typed into
    exec_done: str  # agent A, exited, in /work/other
    poll_ids: list[str]
    stdin_id: str
    kill_id: str
    patch_id: str
    failed_id: str  # agent B, exec_command with a bad workdir
    handle_running: str
    handle_done: str


def call(
    store: HistoryStore,
    clock: Clock,
    *,
    agent_id: str | None,
    tool: str,
    args: dict[str, Any],
    workdir: str | None = None,
    ok: bool = True,
    result: Any = None,
    error: str | None = None,
    session_handle: str | None = None,
    target: str | None = None,
    files: tuple[FileChange, ...] = (),
) -> str:
    clock.tick()
    inv = store.begin(
        agent_id=agent_id,
        tool_name=tool,
        args=args,
        declared_workdir=workdir,
        real_workdir=workdir,
        session_handle=target,
    )
    clock.tick(0.25)
    store.complete(inv, ok=ok, result=result, error=error, session_handle=session_handle, files=files)
    return inv


def seed(store: HistoryStore, clock: Clock) -> Seeded:
    a = store.agent_for(IDENTITY_KEY_A).agent_id
    b = store.agent_for(IDENTITY_KEY_B).agent_id
    store.set_alias(a, "builder")

    done = call(
        store,
        clock,
        agent_id=a,
        tool="exec_command",
        args={"cmd": "ls", "workdir": "/work/other"},
        workdir="/work/other",
        result={
            "summary": "exited 0",
            "status": "exited",
            "output": "a\n",
            "cwd": "/work/other",
            "wall_time_ms": 40,
            "exit_code": 0,
            "termination_reason": "exit",
        },
        session_handle="h-done",
    )
    store.process_started("h-done", pid=10, cmd="ls", cwd="/work/other", started_at=clock.now)
    store.append_output([("h-done", "a\n")])
    store.process_ended("h-done", exit_code=0, signal=None, reason="exit", ended_at=clock.tick(0.04))

    running = call(
        store,
        clock,
        agent_id=a,
        tool="exec_command",
        args={"cmd": "make test", "workdir": "/work/project"},
        workdir="/work/project",
        result={
            "summary": "still running",
            "status": "running",
            "output": "",
            "cwd": "/work/project",
            "wall_time_ms": 1000,
            "session_handle": "h-run",
        },
        session_handle="h-run",
    )
    store.process_started("h-run", pid=11, cmd="make test", cwd="/work/project", started_at=clock.now)
    store.append_output([("h-run", "\x1b[32mok\x1b[0m line 1\r\n"), ("h-run", "line 2\n")])
    polls = [
        call(
            store,
            clock,
            agent_id=a,
            tool="write_stdin",
            args={"session_handle": "h-run", "chars": ""},
            target="h-run",
            result={
                "summary": "still running",
                "status": "running",
                "output": "",
                "cwd": "/work/project",
                "wall_time_ms": 3000 + i,
                "session_handle": "h-run",
            },
        )
        for i in range(2)
    ]
    stdin = call(
        store,
        clock,
        agent_id=a,
        tool="write_stdin",
        args={"session_handle": "h-run", "chars": "y\n"},
        target="h-run",
        result={
            "summary": "still running",
            "status": "running",
            "output": "",
            "cwd": "/work/project",
            "wall_time_ms": 5000,
            "session_handle": "h-run",
        },
    )
    patch = call(
        store,
        clock,
        agent_id=a,
        tool="apply_patch",
        args={"patch": "*** Begin Patch ..."},
        workdir="/work/project",
        result="Success. Updated the following files:\nA new.txt\nM app.py\nD old.txt\nM moved.py",
        files=(
            FileChange("add", "new.txt", None, 1, 0, ("+hello",)),
            FileChange("update", "app.py", None, 1, 1, ("@@ -1 +1 @@", "-x = 1", "+x = 2")),
            FileChange("delete", "old.txt", None, 0, 1, ("-bye",)),
            FileChange("update", "moved.py", "orig.py", 0, 0, ()),
        ),
    )
    failed = call(
        store,
        clock,
        agent_id=b,
        tool="exec_command",
        args={"cmd": "pwd", "workdir": "/nope"},
        workdir="/nope",
        ok=False,
        error="workdir /nope does not exist",
    )
    kill = call(
        store,
        clock,
        agent_id=a,
        tool="write_stdin",
        args={"session_handle": "h-done", "kill_process": True},
        target="h-done",
        result={
            "summary": "exited 0",
            "status": "exited",
            "output": "",
            "cwd": "/work/other",
            "wall_time_ms": 40,
            "exit_code": 0,
            "termination_reason": "exit",
        },
    )
    return Seeded(a, b, running, done, polls, stdin, kill, patch, failed, "h-run", "h-done")
