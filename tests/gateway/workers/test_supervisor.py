"""The Supervisor on real workers (docs/architecture.md#supervisor): one worker per workdir
however many calls and gateways ask at once, a live worker reused, a dead one replaced by the
next incarnation until the restart policy gives up, and what ``route_handle`` answers for a
live, exited, lost, unknown or malformed handle."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gate import Gate
from tests.support.gateway import wait_for
from tests.support.slowdown import scaled
from tests.support.supervisors import supervising
from zodex_gateway.workers import spawn_lock
from zodex_gateway.workers.restart_policy import RestartPolicy
from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.supervisor import Supervisor, lost_message
from zodex_gateway.workers.worker_client import WorkerClient
from zodex_protocol import messages
from zodex_protocol.errors import ErrorCode, ProtocolError
from zodex_protocol.handles import SessionHandle, worker_id_for
from zodex_protocol.layout import WorkerRecord
from zodex_protocol.replies import SessionResult
from zodex_system import proctree

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def workdir(root: Path) -> str:
    path = root / "wd"
    path.mkdir()
    return os.path.realpath(path)


@pytest.fixture
async def owned(root: Path) -> AsyncIterator[Runtime]:
    runtime = Runtime.create(state_dir=root / "state", use_cgroups=False)
    try:
        yield runtime
    finally:
        runtime.release()


@pytest.fixture
async def supervisor(owned: Runtime) -> AsyncIterator[Supervisor]:
    async with supervising(owned) as started:
        yield started


def started_incarnations(runtime: Runtime, workdir: str) -> list[int]:
    prefix = worker_id_for(workdir) + "-"
    return sorted(
        int(path.name.removeprefix(prefix).removesuffix(".started"))
        for path in runtime.layout.workers_dir.glob(f"{prefix}*.started")
    )


async def killed(client: WorkerClient) -> None:
    """SIGKILL the client's worker and wait for the client to see it (its pidfd)."""
    os.kill(client.record.pid, signal.SIGKILL)
    await wait_for(lambda: not client.alive, what="the client to see its worker die")


async def run(client: WorkerClient, cmd: str, workdir: str, **args: Any) -> dict[str, Any]:
    body = {"cmd": cmd, "workdir": workdir, "yield_time_ms": 5000, **args}
    result: dict[str, Any] = await client.request(messages.EXEC, body, timeout=30)
    return result


# ---- worker_for ------------------------------------------------------------------------


async def test_concurrent_calls_from_two_gateways_start_one_worker(
    owned: Runtime, supervisor: Supervisor, workdir: str
) -> None:
    async with supervising(Runtime.join(owned.layout.root, state_dir=owned.state_dir)) as joined:
        clients = await asyncio.gather(
            *(supervisor.worker_for(workdir) for _ in range(4)),
            *(joined.worker_for(workdir) for _ in range(4)),
        )
        mine, theirs = clients[:4], clients[4:]
        assert all(c is mine[0] for c in mine) and all(c is theirs[0] for c in theirs)
        assert {(c.record.pid, c.incarnation) for c in clients} == {(mine[0].record.pid, 1)}
        assert started_incarnations(owned, workdir) == [1]
        assert await mine[0].request(messages.PING, {}, timeout=10) == await theirs[0].request(
            messages.PING, {}, timeout=10
        )


async def test_a_live_worker_is_reused_not_respawned(
    owned: Runtime, supervisor: Supervisor, workdir: str
) -> None:
    first = await supervisor.worker_for(workdir)
    assert await supervisor.worker_for(workdir) is first
    # Another gateway finds it through its record and connects to it.
    async with supervising(Runtime.join(owned.layout.root, state_dir=owned.state_dir)) as joined:
        other = await joined.worker_for(workdir)
        assert other is not first
        assert (other.record.pid, other.incarnation) == (first.record.pid, 1)
        assert started_incarnations(owned, workdir) == [1]
        joined.clients.clear()  # leave the worker to its owner: a joined gateway stops what it knows


async def test_a_worker_whose_socket_was_removed_is_ended_when_next_used_and_only_then(
    root: Path, supervisor: Supervisor, workdir: str
) -> None:
    """A call looks at the socket of the worker it goes to, not at every worker's: with
    hundreds of workers that would be hundreds of stats per call."""
    other_dir = root / "other"
    other_dir.mkdir()
    other = await supervisor.worker_for(str(other_dir.resolve()))
    first = await supervisor.worker_for(workdir)
    os.unlink(first.record.request_endpoint.removeprefix("ipc://"))
    assert await supervisor.worker_for(str(other_dir.resolve())) is other
    assert first.alive and proctree.is_alive(first.record.pid, first.record.pid_start)
    successor = await supervisor.worker_for(workdir)
    assert successor.incarnation == 2 and not first.alive
    await wait_for(
        lambda: not proctree.is_alive(first.record.pid, first.record.pid_start),
        what="the unreachable worker to be ended",
    )
    assert (await run(successor, "echo ok", workdir))["output"] == "ok\n"


async def test_a_dead_worker_is_replaced_until_the_policy_gives_up(
    owned: Runtime, supervisor: Supervisor, workdir: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="zodex.gateway")
    worker_id = worker_id_for(workdir)
    policy = supervisor.policies[worker_id] = RestartPolicy(max_crashes=2)
    first = await supervisor.worker_for(workdir)
    # A clean exit (the worker leaves its exit file) is not a crash.
    await first.request(messages.SHUTDOWN, {}, timeout=10)
    await wait_for(lambda: not first.alive, what="the worker to stop")
    second = await supervisor.worker_for(workdir)
    assert second.incarnation == 2 and policy.recent_crashes() == 0
    await killed(second)
    third = await supervisor.worker_for(workdir)
    assert third.incarnation == 3 and policy.recent_crashes() == 1
    await killed(third)
    with pytest.raises(ProtocolError) as caught:
        await supervisor.worker_for(workdir)
    assert caught.value.code == ErrorCode.WORKER_UNAVAILABLE
    assert str(caught.value).startswith(f"the worker for {workdir} crashed 2 times in 60s; not restarting it")
    assert started_incarnations(owned, workdir) == [1, 2, 3], "giving up starts nothing"
    # The log tells each start and end apart, with the exit status or signal.
    pids = [first.record.pid, second.record.pid, third.record.pid]
    which = [f"worker for {workdir} (pid {pid}, incarnation {n})" for n, pid in enumerate(pids, 1)]
    expected = [
        ("INFO", f"worker for {workdir} started (pid {pids[0]}, incarnation 1)"),
        ("INFO", f"{which[0]} exited cleanly (exit status 0)"),
        ("INFO", f"worker for {workdir} started (pid {pids[1]}, incarnation 2)"),
        ("ERROR", f"{which[1]} crashed: killed by SIGKILL; its sessions are lost"),
        ("INFO", f"worker for {workdir} started (pid {pids[2]}, incarnation 3)"),
        ("ERROR", f"{which[2]} crashed: killed by SIGKILL; its sessions are lost"),
        (
            "ERROR",
            f"the worker for {workdir} crashed 2 times in 60s; not restarting it until 60s pass without "
            "a crash (tool calls there fail until then)",
        ),
    ]

    def logged() -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "zodex.gateway"]

    await wait_for(lambda: all(line in logged() for line in expected), what=f"{expected} in {logged()}")
    assert sorted(logged(), key=expected.index) == expected, "each once, nothing else"


async def test_a_worker_that_fails_to_start_counts_as_a_crash(
    root: Path, supervisor: Supervisor, workdir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = root / "attempts"
    script = root / "crash.py"
    script.write_text(f"open({str(attempts)!r}, 'a').write('x')\nraise SystemExit(3)\n")
    monkeypatch.setenv("ZODEX_WORKER_ARGV", json.dumps([sys.executable, str(script)]))
    for _ in range(3):
        with pytest.raises(ProtocolError) as caught:
            await supervisor.worker_for(workdir)
        # The worker's own exit status, not one lost to an early reap (once reported as 255).
        assert str(caught.value) == (
            f"could not start a worker for {workdir}: it exited during start-up (status 3); "
            "check the gateway log and retry"
        ), caught.value
    with pytest.raises(ProtocolError) as caught:
        await supervisor.worker_for(workdir)
    assert "crashed 3 times in 60s" in str(caught.value)
    assert attempts.read_text() == "xxx", "no start is attempted once the policy gave up"


# ---- route_handle ----------------------------------------------------------------------


async def test_route_handle_decisions(
    root: Path, owned: Runtime, supervisor: Supervisor, workdir: str
) -> None:
    worker_id = worker_id_for(workdir)
    client = await supervisor.worker_for(workdir)
    running = (await run(client, "sleep 30", workdir, yield_time_ms=50))["session_handle"]
    assert await supervisor.route_handle(running) is client

    unknown = [
        "not-a-handle",
        str(SessionHandle.new(worker_id, 7)),  # an incarnation that never started
        str(SessionHandle.new("abcdefg", 1)),  # a worker this runtime never had
        str(SessionHandle(worker_id, 1, "0000000000")),  # the live worker's id, a made-up token
    ]
    for text in unknown[:3]:
        with pytest.raises(ProtocolError) as caught:
            await supervisor.route_handle(text)
        assert (caught.value.code, str(caught.value)) == (
            ErrorCode.UNKNOWN_HANDLE,
            f"Unknown session handle: {text}",
        )
    # A made-up token of the live incarnation goes to its worker, which knows it not.
    assert await supervisor.route_handle(unknown[3]) is client

    # Killed: its incarnation was registered as started and left no exit file.
    await killed(client)
    for _ in range(2):  # and it stays lost once the next incarnation runs
        with pytest.raises(ProtocolError) as caught:
            await supervisor.route_handle(running)
        assert (caught.value.code, str(caught.value)) == (
            ErrorCode.SESSION_LOST,
            lost_message(running, workdir),
        )
        successor = await supervisor.worker_for(workdir)
        assert successor.incarnation == 2

    # A clean exit leaves the final results: the handle answers them, with no output.
    gate = Gate.make(root)
    ended = await run(successor, f"{gate.wait}; echo hi; exit 4", workdir, yield_time_ms=50)
    handle = ended["session_handle"]
    await gate.release()
    async with asyncio.timeout(scaled(20)):
        while ended["status"] == "running":
            ended = await successor.request(
                messages.WRITE, {"session_handle": handle, "yield_time_ms": 5000}, 30
            )
    assert (ended["exit_code"], ended["output"]) == (4, "hi\n")
    await successor.request(messages.SHUTDOWN, {}, timeout=10)
    await wait_for(lambda: not successor.alive, what="the worker to stop")
    final = await supervisor.route_handle(handle)
    assert isinstance(final, SessionResult)
    assert (final.status, final.exit_code, final.output) == ("exited", 4, "")

    await supervisor.shutdown()
    for call in (supervisor.route_handle(handle), supervisor.worker_for(workdir)):
        with pytest.raises(ProtocolError) as caught:
            await call
        assert caught.value.code == ErrorCode.STOPPING


async def test_a_handle_of_a_live_worker_this_gateway_never_met(
    owned: Runtime, supervisor: Supervisor, workdir: str
) -> None:
    """A handle issued through another gateway routes to the shared worker by its record."""
    handle = (await run(await supervisor.worker_for(workdir), "sleep 30", workdir, yield_time_ms=50))[
        "session_handle"
    ]
    async with supervising(Runtime.join(owned.layout.root, state_dir=owned.state_dir)) as joined:
        target = await joined.route_handle(handle)
        assert isinstance(target, WorkerClient)
        record = WorkerRecord.read(owned.layout.record_file(worker_id_for(workdir)))
        assert record is not None and target.record == record
        assert proctree.is_alive(record.pid, record.pid_start)
        joined.clients.clear()  # leave the worker to its owner


@pytest.mark.parametrize("planted", ["link", "empty directory", "fifo"])
async def test_something_planted_at_the_spawn_lock_is_removed_not_followed(
    root: Path, owned: Runtime, workdir: str, planted: str
) -> None:
    """In Sprite the registry directory is the agent's to write: a link or directory in the
    lock's place must neither be followed nor block the workdir."""
    lock = owned.layout.spawn_lock(worker_id_for(workdir))
    lock.parent.mkdir(parents=True, exist_ok=True)
    target = root / "target"
    target.write_text("untouched")
    if planted == "link":
        lock.symlink_to(target)
    elif planted == "fifo":  # opened on the loop: it must not hold the open up
        os.mkfifo(lock)
    else:
        lock.mkdir()
    async with supervising(owned) as supervisor:
        client = await supervisor.worker_for(workdir)
        assert (await run(client, "echo ok", workdir))["output"] == "ok\n"
    assert target.read_text() == "untouched"
    assert lock.is_file() and not lock.is_symlink()


async def test_a_spawn_lock_that_cannot_be_replaced_is_a_clear_error(owned: Runtime, workdir: str) -> None:
    lock = owned.layout.spawn_lock(worker_id_for(workdir))
    (lock / "inside").mkdir(parents=True)  # a directory that is not empty is not removed
    async with supervising(owned) as supervisor:
        with pytest.raises(ProtocolError) as refused:
            await supervisor.worker_for(workdir)
    assert refused.value.code == ErrorCode.WORKER_UNAVAILABLE
    assert refused.value.message == (
        f"could not start a worker for {workdir}: its spawn lock {lock} cannot be opened "
        "(Is a directory); retry"
    )
    assert (lock / "inside").is_dir() and not owned.layout.record_file(worker_id_for(workdir)).exists()


HOLDER = "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"


def hold_lock(path: Path) -> subprocess.Popen[str]:
    """A process that holds ``path``'s flock until its stdin closes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


async def test_a_free_spawn_lock_is_taken_without_a_thread_and_a_held_one_waited_for(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    real_thread = threading.Thread

    def counting_thread(*args: Any, **kwargs: Any) -> threading.Thread:
        started.append(kwargs.get("name", "another"))
        return real_thread(*args, **kwargs)

    def no_executor(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the lock file is opened on the loop, not on the executor")

    monkeypatch.setattr(spawn_lock.threading, "Thread", counting_thread)
    monkeypatch.setattr(spawn_lock.asyncio, "to_thread", no_executor)
    path = root / "free.lock"
    fd = await spawn_lock.take(path)
    assert started == [], "a free lock costs no thread"
    holder = hold_lock(root / "held.lock")
    waiting = asyncio.create_task(spawn_lock.take(root / "held.lock", wait_s=30))
    await wait_for(lambda: started == ["zodex-spawn-lock"], what="the wait for a held lock")
    assert not waiting.done()
    holder.communicate("")
    os.close(await waiting)
    os.close(fd)


async def test_a_spawn_lock_held_for_good_fails_that_workdir_only_and_within_a_bound(
    root: Path, owned: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight workdirs whose locks another process holds (more than the default executor has
    threads) fail after the bound, saying so; a ninth workdir starts meanwhile."""
    monkeypatch.setattr(spawn_lock, "SPAWN_LOCK_WAIT_S", 1.0)
    held = []
    for i in range(8):
        (root / f"held{i}").mkdir()
        held.append(os.path.realpath(root / f"held{i}"))
    holders = [hold_lock(owned.layout.spawn_lock(worker_id_for(w))) for w in held]
    (root / "free").mkdir()
    free = os.path.realpath(root / "free")
    try:
        async with supervising(owned) as supervisor:
            outcomes = await asyncio.gather(*(supervisor.worker_for(w) for w in held), return_exceptions=True)
            client = await supervisor.worker_for(free)
            assert (await run(client, "echo free", free))["output"] == "free\n"
            for workdir, outcome in zip(held, outcomes, strict=True):
                assert isinstance(outcome, ProtocolError) and outcome.code == ErrorCode.WORKER_UNAVAILABLE
                lock = owned.layout.spawn_lock(worker_id_for(workdir))
                assert outcome.message == (
                    f"could not start a worker for {workdir}: its spawn lock {lock} is held by another "
                    "process for over 1 s; retry"
                )
            for holder in holders:
                holder.communicate("")
            again = await supervisor.worker_for(held[0])  # the abandoned waits let their locks go
            assert (await run(again, "echo again", held[0]))["output"] == "again\n"
    finally:
        for holder in holders:
            if holder.poll() is None:
                holder.communicate("")


async def test_a_spawn_lock_another_account_made_is_replaced_not_waited_on(
    owned: Runtime, workdir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Sprite the agent can write the registry directory: a lock file it made first, and
    holds, guards nothing and holds nothing up."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to make the lock file another account's")
    monkeypatch.setattr(spawn_lock, "SPAWN_LOCK_WAIT_S", 30.0)
    lock = owned.layout.spawn_lock(worker_id_for(workdir))
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    os.chown(lock, 65534, 65534)  # nobody's, as the agent's would be in Sprite
    holder = hold_lock(lock)
    try:
        assert lock.stat().st_uid != 0
        async with supervising(owned) as supervisor:
            async with asyncio.timeout(15):  # well within the 30 s wait: it did not wait
                client = await supervisor.worker_for(workdir)
            assert (await run(client, "echo mine", workdir))["output"] == "mine\n"
        assert lock.stat().st_uid == 0, "replaced by the gateway's own"
    finally:
        holder.communicate("")


async def test_a_tombstone_file_is_read_off_the_event_loop(
    owned: Runtime, supervisor: Supervisor, workdir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to 64 MiB the agent may have written: never read or decoded on the loop."""
    from zodex_protocol import tombstones

    handle = SessionHandle.new(worker_id_for(workdir), 3)
    exit_file = owned.layout.exit_file(handle.worker_id, 3)
    exit_file.parent.mkdir(parents=True, exist_ok=True)
    exit_file.write_bytes(b"\x81\xa1h\x80")
    threads: list[threading.Thread] = []
    answer = tombstones.answer_from_file

    def recording(path: Path, text: str, now: float | None = None) -> SessionResult | None:
        threads.append(threading.current_thread())
        return answer(path, text, now)

    monkeypatch.setattr(tombstones, "answer_from_file", recording)
    with pytest.raises(ProtocolError) as caught:
        await supervisor.route_handle(str(handle))
    assert caught.value.code == ErrorCode.UNKNOWN_HANDLE
    assert threads and threads[0] is not threading.main_thread()


class RefusingLauncher:
    """A launcher that cannot start anything: the account has no process to spare."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    async def spawn(self, spec: Any) -> Any:
        raise self.error

    def kill_started(self, worker: Any) -> None: ...

    def kill_record(self, record: WorkerRecord) -> None: ...

    def end_orphans(self, marker: str) -> None: ...


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (OSError(11, "Resource temporarily unavailable"), "Resource temporarily unavailable"),
        (
            OSError(
                "cannot start the worker: the agent's account cannot start another process (its process limit is reached)"
            ),
            "cannot start the worker: the agent's account cannot start another process (its process limit is reached)",
        ),
    ],
)
async def test_a_worker_that_cannot_be_started_is_a_tool_error(
    owned: Runtime, workdir: str, error: OSError, reason: str
) -> None:
    """Not an exception with an errno: the documented tool error (docs/tools.md#errors)."""
    supervisor = Supervisor(owned, RefusingLauncher(error))
    try:
        with pytest.raises(ProtocolError) as refused:
            await supervisor.worker_for(workdir)
    finally:
        await supervisor.shutdown()
    assert refused.value.code == ErrorCode.WORKER_UNAVAILABLE
    assert refused.value.message == f"could not start a worker for {workdir}: {reason}; retry"


@pytest.mark.parametrize("which", ["started", "exit"])
async def test_a_directory_planted_at_an_incarnation_file_is_removed_or_refused(
    owned: Runtime, workdir: str, which: str
) -> None:
    layout = owned.layout
    worker_id = worker_id_for(workdir)
    planted = layout.started_file(worker_id, 1) if which == "started" else layout.exit_file(worker_id, 1)
    (planted / "inside").mkdir(parents=True)
    async with supervising(owned) as supervisor:
        with pytest.raises(ProtocolError) as refused:
            await supervisor.worker_for(workdir)
        assert refused.value.code == ErrorCode.WORKER_UNAVAILABLE
        assert refused.value.message == (
            f"could not start a worker for {workdir}: {planted} is in the way and cannot be removed; "
            "remove it, then retry"
        )
        assert not layout.record_file(worker_id).exists(), "nothing started"
        (planted / "inside").rmdir()  # now empty: removed by the next call
        client = await supervisor.worker_for(workdir)
        assert (await run(client, "echo ok", workdir))["output"] == "ok\n"
