"""The root helper and a worker template the agent controls (docs/sprite.md#worker-template):
a real helper as root, a template that is the agent's own program (the agent can ptrace or
replace the real one). An honest answer gives a worker the helper signals through its
pidfd; every lie — the pid of another process, of root's, of a process not its child, of
one that has exited, a pid that is not the pidfd's, no pidfd, garbage, silence — is
refused: the template is stopped, the worker started as a new process on new pipes, and
the process it named never signalled. A template that keeps crashing is given up on, and
workers start as new processes (root only)."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.sprite.serve.helper_support import HelperProcess, bystander, spawn_request, untouched
from tests.support.accounts import Account, processes_of
from tests.support.waiting import wait_until
from zodex_system import proctree

pytestmark = pytest.mark.timeout(120)

SYSTEM_PYTHON = "/usr/bin/python3"  # the agent can run it; the hostile template needs only its stdlib

Start = Callable[[str, int], HelperProcess]


@pytest.fixture
def start_helper(agent: Account, base: Path) -> Iterator[Start]:
    """Start a helper whose template is ``hostile_template.py <mode> <pid>``, once it says
    the template is ready; stopped afterwards, leaving no process of the agent."""
    script = base / "hostile_template.py"
    shutil.copy(Path(__file__).with_name("hostile_template.py"), script)
    script.chmod(0o644)
    started: list[HelperProcess] = []

    def start(mode: str, other: int) -> HelperProcess:
        helper = HelperProcess(agent, base, [SYSTEM_PYTHON, "-I", str(script), mode, str(other)])
        started.append(helper)
        if mode != "crash":
            helper.until(lambda: bool(helper.ready_templates()))
        return helper

    yield start
    for helper in started:
        try:
            helper.barrier()
            assert helper.process.poll() is None, "the helper kept serving"
        finally:
            assert helper.stop() == 0, helper.stderr()
        for _message, fds in helper.template_news:
            for fd in fds:
                os.close(fd)
    assert processes_of(agent.uid) == [], "stopping the helper leaves no process of the agent"


def parent_of(pid: int) -> int:
    info = proctree.read_proc(pid)
    assert info is not None, f"process {pid} is gone"
    return info.ppid


def spawned(helper: HelperProcess, base: Path) -> tuple[int, list[int]]:
    workdir = base / "work"
    workdir.mkdir(exist_ok=True)
    answer, fds = helper.request(spawn_request(str(workdir)))
    assert answer["op"] == "spawned" and len(fds) == 2, answer
    return answer["pid"], fds


def test_an_honest_template_forks_the_worker_which_is_signalled_through_its_pidfd(
    start_helper: Start, base: Path, agent: Account
) -> None:
    helper = start_helper("honest", 0)
    [template] = helper.ready_templates()
    pid, fds = spawned(helper, base)
    for fd in fds:
        os.close(fd)
    assert parent_of(pid) == template, "forked by the template, not started by the helper"
    assert proctree.read_proc(template) is not None and parent_of(template) == helper.process.pid
    helper.send({"op": "kill_started", "pid": pid})
    helper.until(lambda: pid in helper.exits)
    assert helper.exits[pid] == -signal.SIGKILL, "the status its template reported"


def test_a_worker_whose_template_was_killed_is_still_reported_and_a_new_template_starts(
    start_helper: Start, base: Path
) -> None:
    helper = start_helper("honest", 0)
    [first] = helper.ready_templates()
    pid, fds = spawned(helper, base)
    for fd in fds:
        os.close(fd)
    os.kill(first, signal.SIGKILL)
    helper.until(lambda: len(helper.ready_templates()) == 2)
    second = helper.ready_templates()[1]
    assert second != first and parent_of(second) == helper.process.pid
    assert untouched(pid), "the workers of a dead template go on"
    os.kill(pid, signal.SIGKILL)  # its template is gone: nobody reports its status
    helper.until(lambda: pid in helper.exits)
    assert helper.exits[pid] == 255
    assert "the worker template (pid" in helper.stderr() and "exited (status -9)" in helper.stderr()


LIES = {
    # mode: (whose pid it is given: "agent", "root", "none"; what the helper says)
    "other": ("agent", "which is not its child"),
    "other-root": ("root", "which is not its child"),
    "parent": ("none", "which is not its child"),
    "claims-other": ("agent", "sent the pidfd of process"),
    "claims-other-root": ("root", "sent the pidfd of process"),
    "claims-child": ("root", "sent the pidfd of process"),
    "itself": ("none", "which is not its child"),
    "exited": ("none", "which has already exited"),
    "not-a-pidfd": ("none", "sent a descriptor that is not a pidfd"),
    "no-pidfd": ("none", "sent 0 descriptors"),
    "two-fds": ("none", "sent 2 descriptors"),
    "bool": ("none", "instead of a worker's pid"),
    "garbage": ("none", "sent a malformed packet"),
    "unasked": ("root", "sent 0 descriptors"),
    "silent": ("none", "did not answer within 5 s"),
}
# A worker may end before the helper checks it: no proof of a lie, so its template stays.
NOT_STOPPED = {"exited"}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_lying_template_is_stopped_and_the_worker_started_as_a_new_process(
    lie: str, start_helper: Start, base: Path, agent: Account
) -> None:
    whose, reason = LIES[lie]
    mode = lie.removesuffix("-root")
    with bystander(uid=agent.uid) as agents, bystander() as roots:
        victim = {"agent": agents.pid, "root": roots.pid, "none": 0}[whose]
        helper = start_helper(mode, victim)
        [template] = helper.ready_templates()
        pid, fds = spawned(helper, base)
        try:
            assert pid not in (victim, template, helper.process.pid)
            assert parent_of(pid) == helper.process.pid, "started by the helper itself, as before"
            os.set_blocking(fds[0], False)
            with pytest.raises(BlockingIOError):  # new pipes: nothing the template wrote to the old
                os.read(fds[0], 100)
        finally:
            for fd in fds:
                os.close(fd)
        assert "no worker from the template (" in helper.stderr() and reason in helper.stderr(), (
            helper.stderr()
        )
        if lie in NOT_STOPPED:
            assert proctree.read_proc(template) is not None and helper.ready_templates() == [template]
        else:
            wait_until(lambda: proctree.read_proc(template) is None, what="the lying template to be stopped")
            helper.until(lambda: len(helper.ready_templates()) == 2)  # restarted, as a crashed one
        # Whatever pid it named, the helper signals none of them.
        for claimed in (agents.pid, roots.pid, helper.process.pid, template):
            helper.send({"op": "kill_started", "pid": claimed})
        helper.barrier()
        assert untouched(agents.pid) and untouched(roots.pid) and helper.process.poll() is None


def test_a_template_that_keeps_crashing_is_given_up_on(
    start_helper: Start, base: Path, agent: Account
) -> None:
    helper = start_helper("crash", 0)
    crashes = "zodex sprite helper: the worker template (pid"
    wait_until(lambda: helper.stderr().count(crashes) >= 3, what="three crashes")
    pid, fds = spawned(helper, base)
    for fd in fds:
        os.close(fd)
    assert parent_of(pid) == helper.process.pid
    assert "worker template unavailable (it failed 3 times in 60 s)" in helper.stderr()
    assert helper.stderr().count(crashes) == 3, "no fourth start within the window"
    assert [p for p in processes_of(agent.uid) if p != pid] == [], "no template left"
