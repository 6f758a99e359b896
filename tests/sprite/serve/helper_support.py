"""A real root helper for tests, as ``zodex sprite serve`` forks it, with a stand-in for
the worker's Python (a process that sleeps, so a worker started by mistake would be seen),
and the service's end of its socket; processes that must survive it (root only)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.accounts import Account, processes_of
from tests.support.waiting import wait_until
from zodex_gateway.sprite.helper import MAX_MESSAGE
from zodex_protocol.handles import worker_id_for
from zodex_system import proctree

REPLY_TIMEOUT_S = 10.0
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)

# The helper as ``zodex sprite serve`` forks it, with a stand-in for the worker's Python:
# a process that sleeps, so a worker started by mistake would be seen.
HELPER_SCRIPT = """
import json, socket, sys
from pathlib import Path
from zodex_gateway.sprite.helper import AgentAccount, Helper, HelperConfig
spec = json.loads(sys.argv[1])
agent = AgentAccount(spec["name"], spec["uid"], spec["gid"], Path(spec["home"]))
config = HelperConfig(
    agent=agent,
    worker_argv=["/bin/sh", "-c", "exec sleep 60", "worker"],
    runtime_dir=Path(spec["runtime"]),
    spill_dir=Path(spec["home"]) / "spill",
    shell=["/bin/bash", "-lc"],
    env={"PATH": "/usr/bin:/bin", "HOME": spec["home"]},
    template_argv=spec["template"],
)
Helper(socket.socket(fileno=int(sys.argv[2])), config).run()
"""


class HelperProcess:
    """A running root helper and the service's end of its socket."""

    def __init__(self, agent: Account, base: Path, template: list[str] | None = None) -> None:
        self.agent = agent
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.stderr_path = base / "helper.stderr"
        spec: dict[str, Any] = {
            "name": agent.name,
            "uid": agent.uid,
            "gid": agent.gid,
            "home": str(agent.home),
        }
        spec["runtime"] = str(base / "runtime")
        spec["template"] = template
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", HELPER_SCRIPT, json.dumps(spec), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd="/",
                env={"PYTHONPATH": str(Path(__file__).resolve().parents[3])},
            )
        theirs.close()
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self.ids = 0
        self.exits: dict[int, int] = {}
        self.template_news: list[tuple[dict[str, Any], list[int]]] = []  # what it said of its template

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        data = json.dumps(message).encode()
        socket.send_fds(self.sock, [data], fds or [])

    def next_message(self) -> tuple[dict[str, Any], list[int]]:
        data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, 4)
        assert data, "the helper closed its socket"
        message: dict[str, Any] = json.loads(data)
        return message, fds

    def _kept(self, message: dict[str, Any], fds: list[int]) -> bool:
        """An exit report or news of the template, kept; False for anything else."""
        if message.get("op") == "exited":
            self.exits[message["pid"]] = message["status"]
            return True
        if message.get("op") in ("template", "template_ready"):
            self.template_news.append((message, fds))
            return True
        return False

    def reply(self, request: int) -> tuple[dict[str, Any], list[int]]:
        """The answer to request ``request``; exit reports and template news on the way are kept."""
        while True:
            message, fds = self.next_message()
            if not self._kept(message, fds):
                assert message.get("id") == request, message
                return message, fds

    def until(self, condition: Callable[[], bool]) -> None:
        """Read what the helper says unasked until ``condition`` holds (each read bounded by
        the socket's timeout)."""
        while not condition():
            message, fds = self.next_message()
            assert self._kept(message, fds), f"unasked: {message}"

    def ready_templates(self) -> list[int]:
        return [m["pid"] for m, _ in self.template_news if m["op"] == "template_ready"]

    def request(self, message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        self.ids += 1
        self.send({**message, "id": self.ids})
        return self.reply(self.ids)

    def refused(self, message: dict[str, Any], fds: list[int] | None = None) -> str:
        """The helper's error for ``message``, asserting it started nothing."""
        before = set(processes_of(self.agent.uid))
        self.ids += 1
        self.send({**message, "id": self.ids}, fds)
        answer, got = self.reply(self.ids)
        assert got == [] and answer["op"] == "error", answer
        assert set(processes_of(self.agent.uid)) <= before, f"{message} started something"
        error: str = answer["error"]
        return error

    def barrier(self) -> None:
        """Every message sent before has been handled when this returns: the helper serves
        one message at a time, in order, and answers an unknown request with an error."""
        assert "unknown request" in self.refused({"op": "barrier"})

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def stop(self) -> int:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.send({"op": "stop"})
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.sock.close()
        return self.process.returncode


@contextlib.contextmanager
def bystander(*, uid: int | None = None, env: dict[str, str] | None = None) -> Iterator[proctree.ProcInfo]:
    """A process that must survive: root's unless ``uid`` is given."""
    proc = subprocess.Popen(
        ["sleep", "60"], user=uid, env={"PATH": "/usr/bin:/bin", **(env or {})}, start_new_session=True
    )
    try:
        wait_until(lambda: proctree.read_proc(proc.pid) is not None, what="the bystander to start")
        info = proctree.read_proc(proc.pid)
        assert info is not None
        yield info
    finally:
        proc.kill()
        proc.wait()


def untouched(pid: int) -> bool:
    """Alive, and no SIGKILL pending: signalled processes have the bit set until they die."""
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
    except OSError:
        return False
    pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    return not fields["State"].strip().startswith("Z") and not pending & SIGKILL_BIT


def spawn_request(workdir: str, **override: Any) -> dict[str, Any]:
    """A proper request for ``workdir``, with ``override`` replacing some of its fields."""
    request = {"op": "spawn", "workdir": workdir, "worker_id": worker_id_for(workdir), "incarnation": 1}
    request["limits"] = {}
    request.update(override)
    return request
