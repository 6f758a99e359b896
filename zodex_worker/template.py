"""``python -m zodex_worker.template``: the worker template of one gateway (a fork server).

Starting a worker as a new Python costs the interpreter and every import of the worker
(most of a first call in a new workdir) and a private copy of all their pages. The
template pays that once: it imports the worker's modules, then waits on one socket for
requests to start a worker and forks one per request. The child becomes the worker —
its own session, the descriptors and environment the gateway sends, nothing of the
template's — and only then makes its ZeroMQ context, sockets and event loop; the pages it
never writes stay shared with the template and its siblings. In Local the gateway starts it;
in Sprite and on a fleet host the root helper does, as the agent account, under every rule
it applies to a worker (docs/sprite.md#worker-template).

So that a fork is safe and a child inherits nothing, the template holds no ZeroMQ context,
no event loop and no thread (it refuses to fork if one appears), and no worker's state: it
never runs one itself. Its one channel is a ``SOCK_SEQPACKET`` socket pair its parent made
(descriptor ``--channel``, refused unless the parent made it): nobody else holds the other
end. The messages are JSON objects, one per packet (docs/architecture.md#worker-template):

- template → gateway, once: ``{"ready": <pid>}`` when its imports are done;
- gateway → template: ``{"argv": [...], "env": {...}}`` with one or two descriptors: the
  write end of the pipe that becomes the worker's stdout (where it says ``READY``), and
  what becomes its stderr (else it keeps the template's);
- template → gateway: ``{"pid": <pid>}`` with the worker's pidfd, or ``{"error": "..."}``;
- template → gateway, whenever a worker ends: ``{"exited": <pid>, "status": <code>}`` (as
  ``Popen.returncode``: negative for a signal).

It exits when the gateway closes its end; the workers it forked go on.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from typing import Any, Final, NoReturn

from zodex_system import page_merging, proctree
from zodex_system.terminal_text import TerminalCleaner

# What a worker runs, imported here once so that every worker shares it.
from zodex_worker import main as worker_main
from zodex_worker import patch as _patch  # imported by the worker on its first apply_patch

del _patch

MAX_PACKET: Final = 1 << 20  # an environment and an argv, with room to spare


def warm_up() -> None:
    """What a worker would otherwise compute on its first call and then keep, done once
    here: the output cleaner's pattern (compiled into ``re``'s cache, several ms)."""
    TerminalCleaner()


class BadRequest(Exception):
    """One line: why a request was refused."""


def parse_request(data: bytes, fds: list[int]) -> tuple[argparse.Namespace, dict[str, str]]:
    """The worker's arguments and environment (its stdout, and maybe stderr, are ``fds``);
    ``BadRequest`` otherwise (the caller closes ``fds``)."""
    if len(fds) not in (1, 2):
        raise BadRequest(f"a request carries one or two descriptors, not {len(fds)}")
    try:
        request = json.loads(data)
    except ValueError:
        raise BadRequest("a request is one JSON object") from None
    if not isinstance(request, dict) or set(request) != {"argv", "env"}:
        raise BadRequest('a request is {"argv": [...], "env": {...}}')
    argv, env = request["argv"], request["env"]
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise BadRequest("argv must be a list of strings")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise BadRequest("env must map strings to strings")
    if any("=" in k or not k or "\0" in k + v for k, v in env.items()) or any("\0" in a for a in argv):
        raise BadRequest("env names must be non-empty without '='; no NUL anywhere")
    try:
        with contextlib.redirect_stderr(io.StringIO()) as said:
            args = worker_main.parse_args(argv)
    except SystemExit:
        lines = said.getvalue().strip().splitlines()
        raise BadRequest(f"not a worker's arguments: {lines[-1] if lines else 'refused'}") from None
    return args, env


def become_environment(env: dict[str, str]) -> None:
    """``os.environ`` becomes ``env``, changing only what differs from the template's (each
    change is a ``putenv`` or ``unsetenv``; Local's usually differs in nothing)."""
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


class Spare:
    """A child forked ahead of need and prepared as far as a worker can be without its
    request — CPython's after-fork work, the hand-over, its log, event loop and sockets —
    waiting on a socket pair of its own for the request. The next request takes it; once
    that worker has answered its first tool call it closes its end, and the template forks
    the next spare then, so that the fork does not compete with the call it would speed up."""

    def __init__(self, pid: int, channel: socket.socket) -> None:
        self.pid = pid
        self.channel = channel  # the template's end


def _closed(channel: socket.socket) -> bool:
    """Whether the other end has closed (or, never expected, sent something)."""
    try:
        channel.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


class Template:
    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poller = select.poll()
        self.spare: Spare | None = None  # forked ahead, not yet asked for
        self._starting: dict[int, Spare] = {}  # asked for, not yet serving: by channel fd

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        socket.send_fds(self.channel, [json.dumps(message).encode()], fds or [])

    def serve(self) -> int:
        signal.set_wakeup_fd(self._wake_write)
        signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)  # the wakeup fd does the work
        # What the imports made is never collected again: a collection in a worker would
        # write to every object's header and unshare the pages.
        warm_up()
        gc.collect()
        gc.freeze()
        # Its workers' copies of these pages are often alike: KSM, where it runs, keeps them once.
        page_merging.mark_mergeable()
        self.send({"ready": os.getpid()})
        self._poller.register(self.channel.fileno(), select.POLLIN)
        self._poller.register(self._wake_read, select.POLLIN)
        try:
            return self._serve_until_the_gateway_goes()
        except ConnectionError:  # its end closed while it was being told something
            return 0

    def _serve_until_the_gateway_goes(self) -> int:
        while True:
            for fd, _events in self._poller.poll():
                if fd == self._wake_read:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self._wake_read, 512):
                            pass
                    self.reap()
                elif fd == self.channel.fileno():
                    if not self.handle_one():
                        return 0
                else:
                    self.spare_closed(fd)

    def handle_one(self) -> bool:
        """One request answered; False when the gateway has gone."""
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.channel, MAX_PACKET, 4)
        except ConnectionError:
            return False
        if not data and not fds:
            return False
        try:
            parse_request(data, fds)  # the spare parses it again: a Namespace cannot cross
        except BadRequest as exc:
            for fd in fds:  # before the answer: the gateway may count them when it comes
                os.close(fd)
            self.send({"error": str(exc)})
            return True
        try:
            self.fork_worker(data, fds)
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def fork_worker(self, request: bytes, fds: list[int]) -> None:
        """Hand a checked request (and its descriptors) to the spare, forked now if there is
        none or it has died, and answer with its pid and pidfd."""
        if threading.active_count() != 1:  # a fork would copy a lock some thread holds
            self.send({"error": "the template has a thread; it does not fork"})
            return
        try:
            spare = self._take_spare(request, fds)
        except OSError as exc:
            self.send({"error": f"fork failed: {exc.strerror or exc}"})
            return
        # Not yet reaped (only this loop reaps), so the pid is still the child's.
        pidfd = os.pidfd_open(spare.pid)
        try:
            self.send({"pid": spare.pid}, [pidfd])
        finally:
            os.close(pidfd)

    def _take_spare(self, request: bytes, fds: list[int]) -> Spare:
        spare, self.spare = self.spare, None
        for _attempt in range(2):  # a spare that died unasked: once more, with a fresh one
            if spare is None:
                spare = self.fork_spare()
            try:
                socket.send_fds(spare.channel, [request], fds)
            except OSError:
                self._drop(spare)
                spare = None
                continue
            self._starting[spare.channel.fileno()] = spare
            return spare
        raise OSError("a newly forked spare did not take its request")

    def fork_spare(self) -> Spare:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except BaseException:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            ours.close()
            self.run_spare(theirs)
        theirs.close()
        spare = Spare(pid, ours)
        self._poller.register(ours.fileno(), select.POLLIN)
        return spare

    def spare_closed(self, fd: int) -> None:
        """A spare's end closed: a worker that is serving now (or died starting), after which
        the next spare is forked; or the unasked spare, gone."""
        starting = self._starting.get(fd)
        unasked = self.spare if self.spare is not None and self.spare.channel.fileno() == fd else None
        spare = starting or unasked
        if spare is None or not _closed(spare.channel):
            return  # an event for a number closed and reused earlier in the same poll
        self._drop(spare)
        if starting is None:
            self.spare = None
            return
        del self._starting[fd]
        if self.spare is None and threading.active_count() == 1:
            with contextlib.suppress(OSError):  # no spare: the next request forks
                self.spare = self.fork_spare()

    def _drop(self, spare: Spare) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._poller.unregister(spare.channel.fileno())
        spare.channel.close()

    def reap(self) -> None:
        for pid, status in proctree.exited_children():  # the template is its workers' one reaper
            if self.spare is not None and pid == self.spare.pid:
                self._drop(self.spare)  # never a worker: nobody is told
                self.spare = None
                continue
            self.send({"exited": pid, "status": os.waitstatus_to_exitcode(status)})

    def run_spare(self, channel: socket.socket) -> NoReturn:
        """In the child: drop everything of the template, prepare, wait for the request,
        then run the worker it describes."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.channel.close()
            for other in [*self._starting.values(), *([self.spare] if self.spare else [])]:
                other.channel.close()
            os.close(self._wake_read)
            os.close(self._wake_write)
            os.setsid()  # as start_new_session: a Ctrl-C at the gateway's terminal is not its
            keep = channel.fileno()
            os.closerange(3, keep)  # 0 is /dev/null
            os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
            prepared = worker_main.prepare()
            data, fds, _flags, _addr = socket.recv_fds(channel, MAX_PACKET, 2)
            if not data:
                os._exit(0)  # the template has gone before anyone asked for this worker
            args, env = parse_request(data, fds)
            os.dup2(fds[0], 1)
            if len(fds) == 2:
                os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
            become_environment(env)
            worker_main.start(args, prepared, on_first_answer=channel.close)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def channel_maker(channel: socket.socket) -> int:
    """The pid of the process that made the socket pair (``SO_PEERCRED`` of its other end)."""
    creds = channel.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="zodex-worker-template", description=__doc__)
    parser.add_argument("--channel", required=True, type=int, help="descriptor of the gateway's socket")
    args = parser.parse_args(argv)
    try:
        channel = socket.socket(fileno=args.channel)
    except OSError as exc:
        sys.exit(f"zodex-worker-template: --channel {args.channel} is not a socket ({exc.strerror})")
    if channel.type != socket.SOCK_SEQPACKET or channel.family != socket.AF_UNIX:
        sys.exit("zodex-worker-template: --channel must be a UNIX SOCK_SEQPACKET socket")
    if channel_maker(channel) != os.getppid():
        # Only its starter (the gateway, or Sprite's root helper) may ask it for a worker.
        sys.exit("zodex-worker-template: --channel must be a socket pair its parent made")
    sys.exit(Template(channel).serve())


if __name__ == "__main__":
    main()
