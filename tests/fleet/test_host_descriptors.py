"""A fleet host started with a low soft open-files limit (systemd's 1024) raises it to the
hard limit for itself, while its workers and their commands keep the usual one
(docs/fleet.md#hosts). Root only: a real ``zodex host serve`` in a namespace of its own."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from scripts.fleet_harness import _spawn, zodex_argv
from tests.fleet.fleet_support import (
    exec_through_a_gateway,
    fleet_host,
    one_gateway_key,
    require_netns,
)
from tests.support.accounts import runnable_install
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

LOW_SOFT = 512


def soft_and_hard(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line")


async def test_the_host_raises_its_own_limit_and_its_commands_keep_the_usual(tmp_path: Path) -> None:
    require_netns()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= LOW_SOFT:
        pytest.skip(f"the hard open-files limit here is {hard}")
    gateway_keys = one_gateway_key(tmp_path)
    with runnable_install() as venv, fleet_host("lim", venv / "bin" / "python3", gateway_keys) as host:
        host.stop()  # started again as systemd would start it, with a soft limit of 512
        starts = host.log().count(" serving on ")
        argv = zodex_argv(host.python, "host", "serve", "--config", str(host.base / "host.toml"))
        host.process = _spawn(
            ["ip", "netns", "exec", host.ns.name, "prlimit", f"--nofile={LOW_SOFT}:{hard}", "--", *argv],
            host.stderr_file,
        )
        wait_until(lambda: host.log().count(" serving on ") > starts, timeout=30, what="the host to serve")
        assert soft_and_hard(host.process.pid)[0] == soft_and_hard(host.process.pid)[1] > LOW_SOFT
        shown = await exec_through_a_gateway(host, gateway_keys, tmp_path, "ulimit -n")
        assert shown["output"].strip() == str(LOW_SOFT), "a command sees the usual limit"
