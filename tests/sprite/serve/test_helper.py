"""The root helper's refusals, asked directly (docs/sprite.md#privilege-separation): a real
helper process, as root, with a throwaway agent account. Whatever the service sends, the
helper signals only the agent's processes, starts workers only in a workdir that is the
absolute real path of a directory with the worker id derived from it, refuses an oversized
or malformed request with nothing done, and keeps serving (root only)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Account, processes_of, require_root, throwaway_account
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
)
Helper(socket.socket(fileno=int(sys.argv[2])), config).run()
"""


class HelperProcess:
    """A running root helper and the service's end of its socket."""

    def __init__(self, agent: Account, base: Path) -> None:
        self.agent = agent
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.stderr_path = base / "helper.stderr"
        spec = {"name": agent.name, "uid": agent.uid, "gid": agent.gid, "home": str(agent.home)}
        spec["runtime"] = str(base / "runtime")
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

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        data = json.dumps(message).encode()
        socket.send_fds(self.sock, [data], fds or [])

    def next_message(self) -> tuple[dict[str, Any], list[int]]:
        data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, 4)
        assert data, "the helper closed its socket"
        message: dict[str, Any] = json.loads(data)
        return message, fds

    def reply(self, request: int) -> tuple[dict[str, Any], list[int]]:
        """The answer to request ``request``; exit reports on the way are kept."""
        while True:
            message, fds = self.next_message()
            if message.get("op") == "exited":
                self.exits[message["pid"]] = message["status"]
                continue
            assert message.get("id") == request, message
            return message, fds

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


@pytest.fixture(scope="module")
def agent() -> Iterator[Account]:
    require_root()
    with throwaway_account("za") as account:
        yield account


@pytest.fixture
def base() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="zodex-helper-") as directory:
        os.chmod(directory, 0o755)
        yield Path(directory)


@pytest.fixture
def helper(agent: Account, base: Path) -> Iterator[HelperProcess]:
    running = HelperProcess(agent, base)
    try:
        yield running
        running.barrier()
        assert running.process.poll() is None, "the helper kept serving"
    finally:
        assert running.stop() == 0, running.stderr()
        assert processes_of(agent.uid) == [], "stopping the helper leaves no process of the agent"


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


# ---- what it does when asked properly (so each refusal below is one) ---------------------------


def test_a_proper_spawn_starts_a_worker_as_the_agent_and_kill_started_ends_it(
    helper: HelperProcess, agent: Account, base: Path
) -> None:
    workdir = base / "work"
    workdir.mkdir()
    answer, fds = helper.request(spawn_request(str(workdir)))
    assert answer["op"] == "spawned" and len(fds) == 2, answer
    for fd in fds:
        os.close(fd)
    pid = answer["pid"]
    with open(f"/proc/{pid}/status") as status:
        uids = next(line for line in status if line.startswith("Uid:")).split()[1:]
    assert set(uids) == {str(agent.uid)}
    helper.send({"op": "kill_started", "pid": pid})
    while pid not in helper.exits:  # each wait bounded by the socket's timeout
        message, _ = helper.next_message()
        if message.get("op") == "exited":
            helper.exits[message["pid"]] = message["status"]
    assert helper.exits[pid] == -signal.SIGKILL


def test_a_record_of_the_agent_with_its_start_time_is_killed(helper: HelperProcess, agent: Account) -> None:
    with bystander(uid=agent.uid) as victim:
        helper.send({"op": "kill_record", "pid": victim.pid, "start": victim.start})
        helper.barrier()
        assert not untouched(victim.pid)


# ---- signals: only ever to the agent's processes ----------------------------------------------


def test_a_record_naming_a_process_of_another_account_is_not_signalled(
    helper: HelperProcess, agent: Account
) -> None:
    with bystander() as roots, bystander(uid=agent.uid) as agents:
        requests: list[dict[str, Any]] = [
            {"op": "kill_record", "pid": roots.pid, "start": roots.start},  # root's
            # the helper itself
            {
                "op": "kill_record",
                "pid": helper.process.pid,
                "start": proctree.start_time(helper.process.pid),
            },
            {"op": "kill_record", "pid": 1, "start": proctree.start_time(1)},  # init
            {"op": "kill_record", "pid": agents.pid, "start": agents.start + 1},  # a reused pid
            {"op": "kill_record", "pid": agents.pid, "start": None},
            {"op": "kill_record", "pid": -1, "start": None},  # kill(-1) would reach everything
            {"op": "kill_record", "pid": 0, "start": None},
            {"op": "kill_record", "pid": -agents.pgid, "start": agents.start},  # a process group
            {"op": "kill_record", "pid": True, "start": None},
            {"op": "kill_record", "pid": str(agents.pid), "start": agents.start},
            {"op": "kill_started", "pid": roots.pid},  # not a worker it started
            {"op": "kill_started", "pid": agents.pid},
            {"op": "kill_started", "pid": -1},
        ]
        for request in requests:
            helper.send(request)
        helper.barrier()
        assert untouched(roots.pid) and untouched(agents.pid) and untouched(1)
        assert helper.process.poll() is None


def test_end_orphans_signals_only_the_agent_and_only_for_a_session_marker(
    helper: HelperProcess, agent: Account
) -> None:
    marker = f"{proctree.SESSION_MARKER}=abcdefg1-"
    env = {proctree.SESSION_MARKER: "abcdefg1-0123456789"}
    with bystander(env=env) as roots, bystander(uid=agent.uid, env=env) as agents:
        for bad in (f"{proctree.SESSION_MARKER}=", "PATH=", "", f"{proctree.SESSION_MARKER}=a b-", None, 7):
            assert helper.refused({"op": "end_orphans", "marker": bad}) == "not a session marker"
        assert untouched(roots.pid) and untouched(agents.pid)
        helper.send({"op": "end_orphans", "marker": marker})
        helper.barrier()
        assert untouched(roots.pid), "a root process with the marker is never signalled"
        assert not untouched(agents.pid)


# ---- spawn: the workdir, the worker id, the incarnation, the limits ---------------------------


def test_a_workdir_that_is_not_the_real_path_of_a_directory_is_refused(
    helper: HelperProcess, agent: Account, base: Path
) -> None:
    work = base / "work"
    work.mkdir()
    (work / "file").write_text("")
    (base / "link").symlink_to(work)
    (work / "loop").symlink_to(work / "loop")
    absolute = "workdir must be an absolute path"
    not_real = "is not the real path of a directory"
    cases = {
        "work": absolute,
        "./work": absolute,
        "": absolute,
        f"{work}\0": absolute,
        str(base / "link"): not_real,  # a link to a directory
        f"{work}/../work": not_real,
        f"{work}/": not_real,
        f"{work}//": not_real,
        f"/{work}": not_real,
        str(work / "file"): not_real,
        str(work / "missing"): not_real,
        str(work / "loop"): not_real,
        "/" + "a" * 5000: not_real,
    }
    for workdir, reason in cases.items():
        error = helper.refused(spawn_request(workdir))
        assert reason in error, (workdir, error)
    for workdir in (None, 7, ["/"], {"path": "/"}):
        assert absolute in helper.refused({**spawn_request("/"), "workdir": workdir})


def test_a_worker_id_that_does_not_match_the_workdir_is_refused(helper: HelperProcess, base: Path) -> None:
    other = base / "other"
    other.mkdir()
    for worker_id in (worker_id_for(str(other)), "", None, 7, worker_id_for(str(base)).upper(), "../x"):
        error = helper.refused(spawn_request(str(base), worker_id=worker_id))
        assert error == "worker id does not match the workdir", (worker_id, error)


def test_a_bad_incarnation_is_refused(helper: HelperProcess, base: Path) -> None:
    for incarnation in (0, -1, 36**2 + 1, 10**30, True, "1", 1.0, None):
        error = helper.refused(spawn_request(str(base), incarnation=incarnation))
        assert "incarnation" in error, (incarnation, error)


def test_bad_limits_are_refused(helper: HelperProcess, base: Path) -> None:
    for limits in (
        {"no_such_limit": 1},
        {"idle_worker_exit_s": "soon"},
        {"idle_worker_exit_s": None},
        {"idle_worker_exit_s": True},
        {"idle_worker_exit_s": 1.5},
        {"idle_worker_exit_s": -1},
        {"idle_worker_exit_s": 10**30},
        {"idle_worker_exit_s": [1]},
        [1],
        "limits",
        7,
    ):
        error = helper.refused(spawn_request(str(base), limits=limits))
        assert "limit" in error, (limits, error)


# ---- messages that are not requests ------------------------------------------------------------


def test_oversized_and_malformed_messages_are_refused_and_the_helper_keeps_serving(
    helper: HelperProcess, agent: Account, base: Path
) -> None:
    with bystander(uid=agent.uid) as agents:
        huge = json.dumps(
            {"op": "kill_record", "pid": agents.pid, "start": agents.start, "pad": "x" * MAX_MESSAGE}
        )
        packets = [
            huge.encode(),  # one byte too many is enough; this is far more
            b"not json",
            b"\xff\xfe{}",
            b"[" * 30_000 + b"]" * 30_000,  # nesting deeper than the decoder's recursion
            b'{"op": "spawn", "workdir": ' + b"[" * 30_000 + b"]" * 30_000 + b"}",
            b'["op", "stop"]',
            b'"stop"',
            b"null",
        ]  # (an empty packet reads as the end of the stream, as the service closing it)
        for packet in packets:
            helper.sock.send(packet)
        for op in (None, 7, ["stop"], {"op": "stop"}, "STOP", "spawn "):
            assert "unknown request" in helper.refused({"op": op})
        helper.barrier()
        assert untouched(agents.pid), "an oversized request is not read, let alone done"
        assert helper.stderr().count("refused a message") >= len(packets) - 1


def test_descriptors_sent_to_the_helper_are_closed_not_used(helper: HelperProcess, base: Path) -> None:
    helper.barrier()  # started and serving: its own descriptors are open
    before = set(os.listdir(f"/proc/{helper.process.pid}/fd"))
    readable, writable = os.pipe()
    try:
        error = helper.refused({"op": "spawn", "workdir": "relative"}, [readable, writable])
        assert error == "workdir must be an absolute path"
    finally:
        os.close(readable)
        os.close(writable)
    assert set(os.listdir(f"/proc/{helper.process.pid}/fd")) == before
