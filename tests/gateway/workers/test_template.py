"""Workers forked from the worker template (docs/architecture.md#worker-template): a forked
worker holds the descriptors a newly started one holds and nothing of the template or of
another workdir's worker, has the environment the launcher gives now, a crashed template
is started again until its restart policy gives up, and then workers start as new
processes; the template answers a malformed request with an error and goes on."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.gateway import pid_alive, wait_for
from tests.support.memory import mergeable_mappings
from tests.support.supervisors import supervising
from zodex_gateway.workers.restart_policy import RestartPolicy
from zodex_gateway.workers.runtime import Runtime
from zodex_gateway.workers.supervisor import Supervisor
from zodex_gateway.workers.template_launcher import TemplateLauncher
from zodex_gateway.workers.worker_client import WorkerClient
from zodex_protocol import messages
from zodex_system import proctree
from zodex_worker.template import Template

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def supervisor(root: Path) -> AsyncIterator[Supervisor]:
    runtime = Runtime.create(state_dir=root / "state", use_cgroups=False)
    try:
        async with supervising(runtime) as started:
            yield started
    finally:
        runtime.release()


def new_workdir(root: Path, name: str) -> str:
    path = root / name
    path.mkdir()
    return os.path.realpath(path)


def template_of(supervisor: Supervisor) -> TemplateLauncher:
    assert supervisor.template is not None, "Local's supervisor forks from a template"
    return supervisor.template


def parent_of(pid: int) -> int:
    info = proctree.read_proc(pid)
    assert info is not None, f"process {pid} is gone"
    return info.ppid


def descriptors(pid: int) -> dict[int, str]:
    """fd → what it is, with the inode number of a socket or pipe left out."""
    fd_dir = Path(f"/proc/{pid}/fd")
    return {
        int(fd): re.sub(r"^(socket|pipe):\[\d+\]$", r"\1", os.readlink(fd_dir / fd))
        for fd in os.listdir(fd_dir)
    }


def inodes(pid: int) -> set[str]:
    """The sockets and pipes a process holds, by inode."""
    fd_dir = Path(f"/proc/{pid}/fd")
    links = (os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir))
    return {link for link in links if link.startswith(("socket:", "pipe:"))}


async def run(client: WorkerClient, cmd: str, wd: str) -> dict[str, Any]:
    body = {"cmd": cmd, "workdir": wd, "yield_time_ms": 5000}
    result: dict[str, Any] = await client.request(messages.EXEC, body, timeout=30)
    return result


async def test_a_forked_worker_holds_what_a_new_process_holds_and_nothing_of_others(
    root: Path, supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = [new_workdir(root, name) for name in "abc"]
    first = await supervisor.worker_for(dirs[0])
    second = await supervisor.worker_for(dirs[1])
    template_pid = template_of(supervisor).template_pid
    assert template_pid is not None
    assert parent_of(first.record.pid) == parent_of(second.record.pid) == template_pid
    monkeypatch.setenv("ZODEX_WORKER_TEMPLATE", "off")
    started = await supervisor.worker_for(dirs[2])
    assert parent_of(started.record.pid) == os.getpid(), "off: a new process, the gateway's child"
    # A forked worker holds its end of the spare's channel until its first answer.
    for worker, workdir in zip((first, second, started), dirs, strict=True):
        assert (await run(worker, "true", workdir))["exit_code"] == 0

    # A worker's last descriptors settle just after READY: stdout to /dev/null, the lock the
    # owner watch opens, the gateway's connections accepted (their order, so their numbers,
    # is the threads'). Then both hold the same kinds, as many of each.
    def kinds(pid: int) -> list[str]:
        return sorted(descriptors(pid).values())

    with contextlib.suppress(AssertionError):
        await wait_for(lambda: kinds(second.record.pid) == kinds(started.record.pid), what="settling")
    assert kinds(second.record.pid) == kinds(started.record.pid), "what a newly started worker holds"
    forked, new = descriptors(second.record.pid), descriptors(started.record.pid)
    assert [forked[fd] for fd in (0, 1, 2)] == [new[fd] for fd in (0, 1, 2)]
    assert forked[1] == "/dev/null"
    # None of the template's channel, none of the other worker's sockets or stdout pipe.
    assert not inodes(second.record.pid) & (inodes(template_pid) | inodes(first.record.pid))


async def test_a_forked_worker_has_the_environment_the_launcher_gives_now(
    root: Path, supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZX_PROBE", "when-the-template-started")
    monkeypatch.setenv("ZX_SECRET_OF_THEN", "s3cret")
    first_dir = new_workdir(root, "a")
    first = await supervisor.worker_for(first_dir)
    monkeypatch.setenv("ZX_PROBE", "now")
    monkeypatch.delenv("ZX_SECRET_OF_THEN")
    second_dir = new_workdir(root, "b")
    second = await supervisor.worker_for(second_dir)
    assert parent_of(second.record.pid) == template_of(supervisor).template_pid, "forked, not started"

    then = (await run(first, "env", first_dir))["output"]
    now = (await run(second, "env", second_dir))["output"]
    assert "ZX_PROBE=when-the-template-started" in then and "ZX_SECRET_OF_THEN=s3cret" in then
    assert "ZX_PROBE=now" in now and "ZX_SECRET_OF_THEN" not in now and "when-the-template" not in now


@pytest.mark.skipif(not Path("/sys/kernel/mm/ksm").exists(), reason="this kernel has no KSM")
async def test_a_forked_worker_s_heaps_are_mergeable_and_the_commands_it_runs_are_not(
    root: Path, supervisor: Supervisor
) -> None:
    workdir = new_workdir(root, "a")
    worker = await supervisor.worker_for(workdir)
    template_pid = template_of(supervisor).template_pid
    assert template_pid is not None and parent_of(worker.record.pid) == template_pid
    for pid in (template_pid, worker.record.pid):
        marked = mergeable_mappings(Path(f"/proc/{pid}/smaps").read_text())
        assert {"[heap]", "[anon]"} <= marked and "[stack]" not in marked, marked
        # The interpreter's own data: in libpython, or in the python binary linked without it.
        assert any(Path(name).name.startswith(("libpython", "python3")) for name in marked), marked
    # execve drops the marks with the mappings: nothing of a command is mergeable.
    counted = await run(worker, "grep -c '^VmFlags:.* mg' /proc/self/smaps; echo status $?", workdir)
    assert counted["output"] == "0\nstatus 1\n"


async def test_a_crashed_template_starts_again_until_its_policy_gives_up(
    root: Path, supervisor: Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zodex.gateway")
    launcher = template_of(supervisor)
    launcher.policy = RestartPolicy(max_crashes=2, window_s=60)
    first = await supervisor.worker_for(new_workdir(root, "a"))
    crashed = launcher.template_pid
    assert crashed is not None
    os.kill(crashed, signal.SIGKILL)
    await wait_for(lambda: launcher.template_pid is None, what="the gateway to see its template die")
    # Its worker goes on, and its end is still seen (through its pidfd).
    assert await first.request(messages.PING, {}, timeout=10)
    second = await supervisor.worker_for(new_workdir(root, "b"))
    restarted = launcher.template_pid
    assert restarted not in (None, crashed) and parent_of(second.record.pid) == restarted
    os.kill(first.record.pid, signal.SIGKILL)
    await wait_for(lambda: first.record.pid not in supervisor._children, what="the orphan's end to be seen")

    assert restarted is not None
    os.kill(restarted, signal.SIGKILL)
    await wait_for(lambda: launcher.policy.gave_up(), what="the second crash to be counted")
    third = await supervisor.worker_for(new_workdir(root, "c"))
    fourth = await supervisor.worker_for(new_workdir(root, "d"))
    assert parent_of(third.record.pid) == parent_of(fourth.record.pid) == os.getpid()
    assert launcher.template_pid is None, "given up: no template is started"
    said = [r.getMessage() for r in caplog.records if "worker template unavailable" in r.getMessage()]
    assert said == [
        "worker template unavailable (it crashed 2 times in 60s); starting workers as new processes"
    ]


def test_the_template_answers_a_malformed_request_with_an_error_and_goes_on() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "zodex_worker.template", "--channel", str(theirs.fileno())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        pass_fds=[theirs.fileno()],
    )
    theirs.close()
    ours.settimeout(30)
    try:
        assert json.loads(ours.recv(4096)) == {"ready": proc.pid}
        held = len(os.listdir(f"/proc/{proc.pid}/fd"))
        read_end, write_end = os.pipe()
        requests: list[tuple[bytes, list[int]]] = [
            (b'{"argv": [], "env": {}}', []),
            (b"not json", [write_end]),
            (b'{"argv": "x", "env": {}}', [write_end]),
            (b'{"argv": [], "env": {"A=B": "c"}}', [write_end]),
            (b'{"argv": ["--workdir", "/"], "env": {}}', [write_end]),
            (b'{"argv": [], "env": {}, "more": 1}', [write_end, read_end]),
        ]
        answers = []
        for payload, fds in requests:
            socket.send_fds(ours, [payload], fds)
            answers.append(json.loads(ours.recv(4096)))
        assert [sorted(a) for a in answers] == [["error"]] * len(requests), answers
        assert answers[0]["error"] == "a request carries one or two descriptors, not 0"
        assert answers[4]["error"].startswith("not a worker's arguments: ")
        assert len(os.listdir(f"/proc/{proc.pid}/fd")) == held, "what came with a refused request is closed"
        assert proc.poll() is None, "it goes on serving"
    finally:
        ours.close()  # the template exits when its channel closes
        assert proc.wait(timeout=30) == 0


def test_a_template_whose_gateway_stopped_reading_ends_quietly_when_a_worker_exits(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "zodex_worker.template", "--channel", str(theirs.fileno())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=[theirs.fileno()],
    )
    theirs.close()
    ours.settimeout(30)
    # The worker's stderr: a full pipe, so that the worker, which fails at once (there is no
    # runtime directory), cannot end until this test reads it.
    errors_r, errors_w = os.pipe()
    os.set_blocking(errors_w, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(errors_w, b"x" * 4096)
    os.set_blocking(errors_w, True)
    stdout_r, stdout_w = os.pipe()
    missing = tmp_path / "no-runtime"
    argv = [
        "--runtime-dir",
        str(missing),
        "--workdir",
        str(tmp_path),
        "--worker-id",
        "w1",
        "--incarnation",
        "1",
    ]
    argv += ["--spill-dir", str(missing), "--shell", '["/bin/sh", "-c"]']
    try:
        assert json.loads(ours.recv(4096)) == {"ready": proc.pid}
        socket.send_fds(ours, [json.dumps({"argv": argv, "env": {}}).encode()], [stdout_w, errors_w])
        for fd in (stdout_w, errors_w):
            os.close(fd)
        assert sorted(json.loads(ours.recv(4096))) == ["pid"]
        # The gateway stops reading without closing: the template's report of the exit finds
        # the channel shut, while its poll never sees it end.
        ours.shutdown(socket.SHUT_RD)
        with os.fdopen(errors_r, "rb") as errors:
            errors.read()  # to the end: the worker has written its last and exited
        _, said = proc.communicate(timeout=30)
        assert proc.returncode == 0 and b"Traceback" not in said, said.decode(errors="replace")
    finally:
        ours.close()
        os.close(stdout_r)
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_the_template_does_not_fork_while_it_has_a_thread() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    read_end, write_end = os.pipe()
    try:
        before = len(psutil.Process().children())
        Template(theirs).fork_worker(b'{"argv": [], "env": {}}', [write_end])
        assert json.loads(ours.recv(4096)) == {"error": "the template has a thread; it does not fork"}
        assert len(psutil.Process().children()) == before, "nothing forked"
    finally:
        stop.set()
        thread.join()
        for fd in (read_end, write_end):
            os.close(fd)
        ours.close()
        theirs.close()


def spares_of(template_pid: int, workers: set[int]) -> list[int]:
    """The template's living children that are no worker the gateway knows: its spare."""
    children = psutil.Process(template_pid).children()
    return [c.pid for c in children if c.pid not in workers and c.status() != psutil.STATUS_ZOMBIE]


async def the_spare(supervisor: Supervisor, template_pid: int, what: str = "the spare") -> int:
    """The pid of the template's one spare, once there is one."""
    spares: list[int] = []

    def one_spare() -> bool:
        spares[:] = spares_of(template_pid, set(supervisor._children))
        return len(spares) == 1

    await wait_for(one_spare, what=what)
    return spares[0]


async def a_worker_that_answered(root: Path, supervisor: Supervisor) -> tuple[WorkerClient, int]:
    """A worker that has answered a tool call (so the template has forked its next spare)
    and the template's pid."""
    workdir = new_workdir(root, "a")
    worker = await supervisor.worker_for(workdir)
    assert (await run(worker, "true", workdir))["exit_code"] == 0
    template_pid = template_of(supervisor).template_pid
    assert template_pid is not None
    return worker, template_pid


async def test_the_next_worker_is_the_spare_forked_once_the_last_one_answered(
    root: Path, supervisor: Supervisor
) -> None:
    first_dir = new_workdir(root, "a")
    first = await supervisor.worker_for(first_dir)
    template_pid = template_of(supervisor).template_pid
    assert template_pid is not None
    assert not spares_of(template_pid, {first.record.pid}), "none forked on this worker's start path"
    assert (await run(first, "true", first_dir))["exit_code"] == 0
    spare = await the_spare(supervisor, template_pid, "the spare forked once the first worker answered")
    second_dir = new_workdir(root, "b")
    second = await supervisor.worker_for(second_dir)
    assert second.record.pid == spare, "the request took the spare forked ahead of it"
    assert (await run(second, "pwd", second_dir))["output"].strip() == second_dir
    assert await the_spare(supervisor, template_pid, "the next spare") not in (first.record.pid, spare)


async def test_a_spare_that_dies_unasked_is_nobodys_worker_and_the_next_request_forks(
    root: Path, supervisor: Supervisor
) -> None:
    _first, template_pid = await a_worker_that_answered(root, supervisor)
    killed = psutil.Process(await the_spare(supervisor, template_pid))
    killed.kill()
    killed.wait(timeout=10)
    await wait_for(lambda: not spares_of(template_pid, set(supervisor._children)), what="it to be reaped")
    second_dir = new_workdir(root, "b")
    second = await supervisor.worker_for(second_dir)
    assert second.record.pid != killed.pid and parent_of(second.record.pid) == template_pid
    assert (await run(second, "true", second_dir))["exit_code"] == 0
    assert template_of(supervisor).template_pid == template_pid, "the template went on"


async def test_the_spare_leaves_with_its_template(root: Path, supervisor: Supervisor) -> None:
    _first, template_pid = await a_worker_that_answered(root, supervisor)
    launcher = template_of(supervisor)
    spare = psutil.Process(await the_spare(supervisor, template_pid))
    os.kill(template_pid, signal.SIGKILL)
    await wait_for(lambda: launcher.template_pid is None, what="the gateway to see its template die")
    await wait_for(lambda: not pid_alive(spare.pid), what="the spare to end once its template's end closed")
