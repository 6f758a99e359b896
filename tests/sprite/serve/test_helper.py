"""The root helper's refusals, asked directly (docs/sprite.md#privilege-separation): a real
helper process, as root, with a throwaway agent account. Whatever the service sends, the
helper signals only the agent's processes, starts workers only in a workdir that is the
absolute real path of a directory with the worker id derived from it, refuses an oversized
or malformed request with nothing done, and keeps serving (root only)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.sprite.serve.helper_support import HelperProcess, bystander, spawn_request, untouched
from tests.support.accounts import Account
from zodex_gateway.sprite.helper import MAX_MESSAGE
from zodex_protocol.handles import worker_id_for
from zodex_system import proctree

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
    helper.until(lambda: pid in helper.exits)
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
