"""The workers' stderr in the service's log: the agent controls what it says (it may ptrace
its worker), so lines are escaped, their number bounded for all workers together, and every
pipe drained."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from pathlib import Path

import pytest

from zodex_gateway.sprite import helper
from zodex_gateway.sprite.launcher import STDERR_BURST_LINES, HelperLauncher, LineBudget, _log_stderr
from zodex_gateway.workers.launcher import WorkerSpec
from zodex_protocol.limits import Limits
from zodex_system.log_lines import LogFormatter

pytestmark = pytest.mark.timeout(60)


def test_the_budget_allows_a_burst_then_a_steady_rate() -> None:
    now = [0.0]
    budget = LineBudget(burst=3, per_s=2.0, clock=lambda: now[0])
    assert [budget.take() for _ in range(5)] == [True, True, True, False, False]
    assert budget.dropped == 2
    now[0] += 0.5  # one line's worth of time
    assert [budget.take(), budget.take()] == [True, False]
    now[0] += 100  # never more than the burst at once
    assert sum(budget.take() for _ in range(10)) == 3


async def test_a_flood_is_drained_and_only_a_bounded_part_logged(caplog: pytest.LogCaptureFixture) -> None:
    read_fd, write_fd = os.pipe()
    lines = 5000

    def flood() -> None:  # more than a pipe holds: the reader must keep draining
        with os.fdopen(write_fd, "wb") as out:
            out.write(b"first\r\x1b[2Kforged line\n")
            out.write(b"AAAA\n" * lines)

    writer = threading.Thread(target=flood)
    writer.start()
    with caplog.at_level(logging.WARNING, logger="zodex.sprite"):
        await _log_stderr("worker 4242", read_fd, LineBudget(burst=50, per_s=0.0))
    writer.join(timeout=10)
    assert not writer.is_alive()
    records = [r for r in caplog.records if r.name == "zodex.sprite"]
    formatted = [LogFormatter("%(message)s").format(r) for r in records]
    assert formatted[0] == "worker 4242: first\\r\\x1b[2Kforged line", "escaped by the log's formatter"
    assert len(formatted) == 51
    assert formatted[-1] == f"{lines + 1 - 50} lines of the workers' stderr were not logged (too many)"


class FakeHelper:
    """The root helper's side of the socket: each spawn answered with the pipes of a
    'worker' that writes ``lines`` lines to its stderr and exits."""

    def __init__(self, sock: socket.socket, lines: int) -> None:
        self.sock = sock
        self.lines = lines
        self.writers: list[threading.Thread] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        pid = 50_000
        while True:
            message, _fds = helper.receive(self.sock)
            if message is None or message.get("op") == "stop":
                return
            if message.get("op") != "spawn":
                continue
            pid += 1
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            helper.send(self.sock, {"op": "spawned", "id": message["id"], "pid": pid}, [out_r, err_r])
            os.close(out_r)
            os.close(err_r)
            writer = threading.Thread(target=self.write, args=(pid, out_w, err_w))
            writer.start()
            self.writers.append(writer)

    def write(self, pid: int, out_w: int, err_w: int) -> None:
        with os.fdopen(err_w, "wb") as err:
            err.write(b"".join(f"worker {pid} line {i}\n".encode() for i in range(self.lines)))
        os.close(out_w)


async def test_new_workers_do_not_bring_a_fresh_budget(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Five workers, each writing more than the burst: together they get one burst."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fake = FakeHelper(theirs, lines=STDERR_BURST_LINES + 50)
    launcher = HelperLauncher(ours, lambda: None)
    workers = 5
    try:
        with caplog.at_level(logging.WARNING, logger="zodex.sprite"):
            for n in range(workers):
                spec = WorkerSpec(tmp_path, f"/w{n}", f"id{n}", 1, tmp_path, ["/bin/sh"], Limits())
                await launcher.spawn(spec)
            for writer in list(fake.writers):
                await asyncio.to_thread(writer.join, 10)
            await asyncio.wait_for(asyncio.gather(*launcher._tasks), 20)
    finally:
        launcher._send({"op": "stop"})
        launcher.close()
        fake.thread.join(timeout=10)
        theirs.close()
    logged = [r for r in caplog.records if r.name == "zodex.sprite" and " line " in r.getMessage()]
    # The steady rate adds a few lines while the test runs; five fresh bursts would be 1,000.
    assert STDERR_BURST_LINES <= len(logged) < STDERR_BURST_LINES + 50
    dropped = sum(
        int(r.getMessage().split()[0]) for r in caplog.records if "were not logged" in r.getMessage()
    )
    assert len(logged) + dropped == workers * (STDERR_BURST_LINES + 50)
