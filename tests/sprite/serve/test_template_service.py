"""A real ``zodex sprite serve`` forks its workers from a worker template the root helper
started as the agent (docs/sprite.md#worker-template): one template for all workdirs, a
forked worker holds exactly the kinds of descriptors a newly started one holds and none of
another workdir's worker or of the template, its commands get the agent's clean
environment, and ``ZODEX_WORKER_TEMPLATE=off`` starts workers as the helper's children
(root only)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sprite.serve.sprite_support import MARKER, Sprite, sprite_setup, tool_json
from tests.support.accounts import require_root
from tests.support.waiting import wait_until
from zodex_system import proctree

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def sprite() -> Iterator[Sprite]:
    require_root()
    with sprite_setup() as running:
        # Until then workers start as new processes; from then on they are forked.
        wait_until(lambda: "worker template ready" in running.log_file.read_text(), what="the template")
        yield running


def workdir(sprite: Sprite, name: str) -> str:
    path = sprite.workspace / name
    path.mkdir(exist_ok=True)
    os.chown(path, sprite.agent.uid, sprite.agent.gid)
    return str(path)


def worker_pid(sprite: Sprite, directory: str) -> int:
    for record in (sprite.runtime_dir / "runtime" / "w").glob("*.json"):
        data = json.loads(record.read_text())
        if data["workdir"] == directory:
            pid: int = data["pid"]
            return pid
    raise AssertionError(f"no worker registered for {directory}")


def parent_of(pid: int) -> int:
    info = proctree.read_proc(pid)
    assert info is not None, f"process {pid} is gone"
    return info.ppid


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def descriptor_kinds(pid: int, base: Path) -> tuple[list[str], list[str]]:
    """What a process holds on 0-2, and what else (sorted), the inode of a socket or pipe
    and the service's own directory left out."""
    fd_dir = Path(f"/proc/{pid}/fd")
    kinds = {
        int(fd): re.sub(r"^(socket|pipe):\[\d+\]$", r"\1", os.readlink(fd_dir / fd)).replace(
            str(base), "<base>"
        )
        for fd in os.listdir(fd_dir)
    }
    return [kinds[fd] for fd in (0, 1, 2)], sorted(kind for fd, kind in kinds.items() if fd > 2)


def channels(links: list[str]) -> set[str]:
    """The pipes and sockets among descriptor links, by inode (what two processes could share)."""
    return {link for link in links if re.fullmatch(r"(pipe|socket):\[\d+\]", link)}


def held_objects(pid: int) -> set[str]:
    fd_dir = Path(f"/proc/{pid}/fd")
    return channels([os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)])


async def run_in(sprite: Sprite, directory: str, cmd: str) -> str:
    async with sprite.mcp() as mcp:
        result = tool_json(await mcp.call_tool("exec_command", {"cmd": cmd, "workdir": directory}))
    output: str = result["output"]
    return output


async def test_workers_are_forked_by_one_template_of_the_agent_started_by_the_root_helper(
    sprite: Sprite,
) -> None:
    first, second = workdir(sprite, "one"), workdir(sprite, "two")
    assert (await run_in(sprite, first, "echo one")).strip() == "one"
    assert (await run_in(sprite, second, "echo two")).strip() == "two"
    template = parent_of(worker_pid(sprite, first))
    assert parent_of(worker_pid(sprite, second)) == template
    assert cmdline(template)[1:4] == ["-I", "-m", "zodex_worker.template"]
    uids = next(
        line for line in Path(f"/proc/{template}/status").read_text().splitlines() if line.startswith("Uid:")
    )
    assert set(uids.split()[1:]) == {str(sprite.agent.uid)}
    helper = parent_of(template)
    assert sprite.process is not None and parent_of(helper) == sprite.process.pid, (
        "the root helper started it"
    )
    assert "worker template ready" in Path(sprite.log_file).read_text()


async def test_a_forked_worker_holds_nothing_of_another_workdir_or_of_the_template(sprite: Sprite) -> None:
    first, second = workdir(sprite, "three"), workdir(sprite, "four")
    await run_in(sprite, first, "true")
    # As the agent, from the worker's own command: its parent's descriptors and environment.
    seen = await run_in(sprite, second, 'for f in /proc/$PPID/fd/*; do readlink "$f"; done; echo ==; env')
    links, env_lines = seen.split("==\n")
    worker_a, worker_b = worker_pid(sprite, first), worker_pid(sprite, second)
    template = parent_of(worker_b)
    held = channels(links.split())
    assert held >= held_objects(worker_b), "the command's parent is the worker"
    assert held.isdisjoint(held_objects(worker_a)), "nothing of the other workdir's worker"
    assert held.isdisjoint(held_objects(template)), "nothing of the template"
    assert not any(first in link for link in links.split()), "no descriptor in the other workdir"
    env = dict(line.split("=", 1) for line in env_lines.splitlines() if "=" in line)
    assert env["HOME"] == str(sprite.agent.home) and env["USER"] == sprite.agent.name
    assert MARKER not in env, "nothing of the service's environment"
    assert not any(name.startswith("ZODEX_WORKER_TEMPLATE") for name in env)
    sprite.extra["forked_kinds"] = descriptor_kinds(worker_b, sprite.base)


async def test_off_starts_workers_as_the_helpers_children_with_the_same_descriptors(sprite: Sprite) -> None:
    with sprite_setup(start=False) as plain:
        plain.start(("/usr/bin/env", "ZODEX_WORKER_TEMPLATE=off"))
        directory = workdir(plain, "plain")
        await run_in(plain, directory, "true")
        pid = worker_pid(plain, directory)
        assert cmdline(pid)[1:4] == ["-I", "-m", "zodex_worker.main"]
        assert plain.process is not None and parent_of(parent_of(pid)) == plain.process.pid
        forked = sprite.extra.get("forked_kinds")
        if forked is None:  # run alone: take a forked worker's now
            other = workdir(sprite, "five")
            await run_in(sprite, other, "true")
            forked = descriptor_kinds(worker_pid(sprite, other), sprite.base)
        assert descriptor_kinds(pid, plain.base) == forked, (
            "a forked worker holds what a newly started one holds"
        )
