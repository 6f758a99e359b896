"""A real stdio gateway forks its workers from its worker template
(docs/architecture.md#worker-template): one template for all workdirs, a killed template is
replaced while its workers go on serving, nothing of it outlives the gateway, and
``ZODEX_WORKER_TEMPLATE=off`` starts workers as the gateway's own children."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from tests.support.gateway import GatewayEnv, gateway_env, pid_alive, stdio_gateway, wait_for
from zodex_protocol.layout import WorkerRecord

pytestmark = pytest.mark.timeout(120)


def worker_pid(genv: GatewayEnv, workdir: Path) -> int:
    real = os.path.realpath(workdir)
    for runtime in genv.runtime_dirs():
        for path in (runtime / "w").glob("*.json"):
            record = WorkerRecord.read(path)
            if record is not None and record.workdir == real:
                return record.pid
    raise AssertionError(f"no worker registered for {real}")


def gateway_of(worker: int) -> psutil.Process:
    """The gateway: the worker's parent, or its template's parent."""
    parent = psutil.Process(worker).parent()
    assert parent is not None
    return parent if "zodex-gateway" in " ".join(parent.cmdline()) else parent.parent()


def templates_of(gateway: psutil.Process) -> list[int]:
    return [p.pid for p in gateway.children() if p.cmdline()[1:3] == ["-m", "zodex_worker.template"]]


async def test_workers_are_forked_from_one_template_that_is_replaced_when_killed(tmp_path: Path) -> None:
    dirs = [tmp_path / name for name in ("a", "b", "c")]
    for d in dirs:
        d.mkdir()
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            for d in dirs[:2]:
                assert (await mcp.exec("echo hi", str(d)))["output"] == "hi\n"
            first, second = (worker_pid(genv, d) for d in dirs[:2])
            gateway = gateway_of(first)
            [template] = templates_of(gateway)
            assert psutil.Process(first).ppid() == psutil.Process(second).ppid() == template

            os.kill(template, signal.SIGKILL)
            await wait_for(lambda: not pid_alive(template), what="the template to die")
            # Its workers go on serving; a new workdir gets a worker from a new template.
            assert (await mcp.exec("echo still", str(dirs[0])))["output"] == "still\n"
            assert (await mcp.exec("echo new", str(dirs[2])))["output"] == "new\n"
            third = worker_pid(genv, dirs[2])
            [replacement] = templates_of(gateway)
            assert replacement != template and psutil.Process(third).ppid() == replacement
        for pid in (first, second, third, replacement):
            await wait_for(lambda pid=pid: not pid_alive(pid), what=f"process {pid} to end with the gateway")


async def test_off_starts_each_worker_as_the_gateways_child(tmp_path: Path) -> None:
    with gateway_env() as genv:
        genv.extra["ZODEX_WORKER_TEMPLATE"] = "off"
        async with stdio_gateway(genv) as mcp:
            assert (await mcp.exec("echo hi", str(tmp_path)))["output"] == "hi\n"
            worker = psutil.Process(worker_pid(genv, tmp_path))
            gateway = worker.parent()
            assert gateway is not None and "zodex-gateway" in " ".join(gateway.cmdline())
            assert templates_of(gateway) == []
