"""A fleet host forks its workers from Sprite's worker template, which its root helper
started as the agent account (docs/sprite.md#worker-template), and a worker so forked
serves the gateway's calls with the host's own arguments. Root only: a real
``zodex host serve`` in a namespace of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fleet.fleet_support import (
    exec_through_a_gateway,
    fleet_host,
    one_gateway_key,
    require_netns,
)
from tests.support.accounts import runnable_install
from tests.support.waiting import wait_until
from zodex_system import proctree

pytestmark = pytest.mark.timeout(180)


def status_line(pid: int, name: str) -> list[str]:
    line = next(
        line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(name)
    )
    return line.split()[1:]


async def test_the_hosts_workers_are_forked_by_the_agents_template(tmp_path: Path) -> None:
    require_netns()
    gateway_keys = one_gateway_key(tmp_path)
    with runnable_install() as venv, fleet_host("tpl", venv / "bin" / "python3", gateway_keys) as host:
        wait_until(lambda: "worker template ready" in host.log(), timeout=30, what="the host's template")
        shown = await exec_through_a_gateway(host, gateway_keys, tmp_path, "echo $PPID")
        worker = int(shown["output"].strip())
        info = proctree.read_proc(worker)
        assert info is not None
        template = info.ppid
        cmdline = Path(f"/proc/{template}/cmdline").read_bytes().split(b"\0")
        assert cmdline[1:4] == [b"-I", b"-m", b"zodex_worker.template"], cmdline
        assert set(status_line(template, "Uid:")) == set(status_line(worker, "Uid:")) == {str(host.agent.uid)}
        assert status_line(worker, "NoNewPrivs:") == ["1"]
