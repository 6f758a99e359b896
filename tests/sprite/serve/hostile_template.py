"""A worker template the agent has replaced (it owns the template, so it can): speaks the
template's protocol, and answers each fork request as its mode says. Standard library only;
started by the root helper as the agent: ``python3 hostile_template.py <mode> <pid> --channel <fd>``.

Modes: ``honest`` forks a child that sleeps, reaps it and reports its exit, as the real
template would; the others lie with the pid of ``<pid>`` (a process that is not theirs to
give), or with malformed answers."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time


def child() -> int:
    """A child that sleeps until killed (it execs, holding no descriptor but 0-2)."""
    pid = os.fork()
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", "60"])
    return pid


def answer(mode: str, other: int, channel: socket.socket) -> None:
    send = lambda message, fds=(): socket.send_fds(channel, [json.dumps(message).encode()], list(fds))  # noqa: E731
    if mode == "honest":
        pid = child()
        send({"pid": pid}, [os.pidfd_open(pid)])
    elif mode == "other":  # a process that is not its child, root's or the agent's
        send({"pid": other}, [os.pidfd_open(other)])
    elif mode == "claims-other":  # its own child's pidfd, another process's number
        send({"pid": other}, [os.pidfd_open(child())])
    elif mode == "claims-child":  # its child's number, another process's pidfd
        send({"pid": child()}, [os.pidfd_open(other)])
    elif mode == "parent":  # the root helper
        send({"pid": os.getppid()}, [os.pidfd_open(os.getppid())])
    elif mode == "itself":
        send({"pid": os.getpid()}, [os.pidfd_open(os.getpid())])
    elif mode == "exited":  # a child that has exited, not reaped: the pid is still its own
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        send({"pid": pid}, [os.pidfd_open(pid)])
    elif mode == "not-a-pidfd":
        read_end, _write_end = os.pipe()
        send({"pid": child()}, [read_end])
    elif mode == "no-pidfd":
        send({"pid": child()})
    elif mode == "two-fds":
        pid = child()
        send({"pid": pid}, [os.pidfd_open(pid), os.pidfd_open(pid)])
    elif mode == "bool":
        send({"pid": True}, [os.pidfd_open(child())])
    elif mode == "garbage":
        channel.send(b"\xff\xfe not json")
    elif mode == "unasked":
        send({"op": "spawned", "pid": other})
    elif mode == "silent":
        time.sleep(3600)


def main() -> None:
    mode, other, channel_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[4])
    channel = socket.socket(fileno=channel_fd)
    if mode == "crash":
        sys.exit(3)
    socket.send_fds(channel, [json.dumps({"ready": os.getpid()}).encode()], [])
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        readable, _, _ = select.select([channel, wake_r], [], [])
        if channel in readable:
            data, fds, _flags, _addr = socket.recv_fds(channel, 1 << 20, 4)
            if not data and not fds:
                return
            if mode != "honest" and fds:  # what it can do with the pipes it was given
                os.write(fds[0], b"READY forged\n")
            for fd in fds:
                os.close(fd)
            answer(mode, other, channel)
        if wake_r in readable:
            os.read(wake_r, 512)
        report_exits(channel)


def report_exits(channel: socket.socket) -> None:
    """As the real template: each child reaped, its status sent."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        message = {"exited": pid, "status": os.waitstatus_to_exitcode(status)}
        socket.send_fds(channel, [json.dumps(message).encode()], [])


if __name__ == "__main__":
    main()
