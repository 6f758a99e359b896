"""``zodex-worker``: one process per workdir, started by a gateway's supervisor.

Not meant to be run by hand. It binds its sockets, publishes its registry record, says
``READY`` on stdout, and serves until told to stop, its runtime owner is gone, it has been
idle for the configured time, or it gets SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import zmq

from zodex_protocol import messages, tombstones
from zodex_protocol.envelope import WireCodec, read_key_file
from zodex_protocol.handles import check_host_incarnation
from zodex_protocol.layout import RuntimeLayout, WorkerRecord
from zodex_protocol.limits import Limits, max_message_bytes
from zodex_protocol.version import PROTOCOL_VERSION
from zodex_system import log_lines, proctree
from zodex_system.cgroups import SessionGroups
from zodex_system.secret_files import write_group_readable_file, write_secret_file
from zodex_worker.output.spill import remove_stale_spill_files
from zodex_worker.reaper import Reaper, become_subreaper
from zodex_worker.server import EventPublisher, WorkerServer
from zodex_worker.service import WorkerConfig, WorkerService
from zodex_worker.stop_conditions import IdleTimer, watch_runtime_owner

SPILL_SWEEP_SECONDS = 3600.0
# Events queued per subscriber before ZeroMQ drops (the subscriber sees a gap): a flood's
# events are 256 KiB each, so this holds at most about 640 MiB of it.
EVENT_HWM = 2_500
BYE_LINGER_MS = 1000  # how long the reply to shutdown may take to leave when the worker closes


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """Built once: argparse looks up its translations for every parser it builds, which the
    worker template (zodex_worker.template) would pay on each worker it forks."""
    parser = argparse.ArgumentParser(prog="zodex-worker", description=__doc__)
    parser.add_argument("--runtime-dir", required=True, type=Path)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--incarnation", required=True, type=int)
    parser.add_argument("--spill-dir", required=True, type=Path)
    parser.add_argument("--shell", required=True, help="JSON list: argv prefix for commands")
    parser.add_argument("--limits", default="{}", help="JSON object of limit overrides")
    parser.add_argument(
        "--host-incarnation",
        default=None,  # argparse would pass a string default through the check
        type=check_host_incarnation,
        help="a fleet host's incarnation, carried at the end of every handle (docs/fleet.md)",
    )
    parser.add_argument(
        "--group-readable-exits",
        action="store_true",
        help="leave the exit file 0640, not 0600: the runtime's owner is another account that "
        "reads it through this worker's group (Sprite)",
    )
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return _parser().parse_args(argv)


@dataclass
class Prepared:
    """What a worker makes before it knows its workdir (see :func:`prepare`)."""

    runner: asyncio.Runner
    context: zmq.Context[zmq.Socket[bytes]]
    router: zmq.Socket[bytes]
    pub: zmq.Socket[bytes]
    pid_start: int | None  # this process's start time, for its registry record


def prepare() -> Prepared:
    """What a worker sets up before it knows its workdir — its log, event loop, ZeroMQ
    context and its two sockets, not yet bound, its start time — so that the worker
    template's spare does it ahead of need."""
    log_lines.log_to_stderr("zodex-worker %(levelname)s %(message)s", logging.WARNING)
    runner = asyncio.Runner()
    runner.get_loop()
    # One libzmq context, plain sockets served on the loop (zodex_protocol.loop_socket): one
    # I/O thread and one reaper thread in all, and every thread is moved with the worker on
    # each spawn into a session's cgroup.
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    # XPUB with a welcome message: a subscriber knows its subscription is live (no event
    # of the first command is lost to ZeroMQ's slow-joiner window) when "welcome" arrives.
    pub = context.socket(zmq.XPUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, EVENT_HWM)
    pub.setsockopt(zmq.XPUB_WELCOME_MSG, messages.WELCOME)
    return Prepared(runner, context, router, pub, proctree.start_time(os.getpid()))


async def run(
    args: argparse.Namespace, prepared: Prepared, on_first_answer: Callable[[], None] | None = None
) -> int:
    """Serve until told to stop; ``on_first_answer`` is called once the first tool call has
    been answered (the worker template's cue to fork its next spare, off this start's path)."""
    loop = asyncio.get_running_loop()
    layout = RuntimeLayout(args.runtime_dir)
    codec = WireCodec(read_key_file(layout.key_file))
    limits = Limits.from_dict(json.loads(args.limits))
    router, pub = prepared.router, prepared.pub
    router.setsockopt(zmq.MAXMSGSIZE, max_message_bytes(limits))
    request_endpoint = layout.request_endpoint(args.worker_id, args.incarnation)
    event_endpoint = layout.event_endpoint(args.worker_id, args.incarnation)
    router.bind(request_endpoint)
    pub.bind(event_endpoint)
    pub_fd = int(pub.getsockopt(zmq.FD))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)  # a signal from READY on stops it cleanly
    # Ready as soon as the sockets are bound and the record says where: the gateway's
    # connection and first request then overlap the rest of the start below, which comes
    # before the first request is read (it is read once the server serves).
    WorkerRecord(
        worker_id=args.worker_id,
        incarnation=args.incarnation,
        pid=os.getpid(),
        pid_start=prepared.pid_start,
        workdir=args.workdir,
        request_endpoint=request_endpoint,
        event_endpoint=event_endpoint,
        protocol=PROTOCOL_VERSION,
    ).publish(layout)
    _announce_ready()

    become_subreaper()
    reaper = Reaper(loop)
    cgroups = SessionGroups.open(layout.root, args.worker_id, args.incarnation)
    config = WorkerConfig(
        worker_id=args.worker_id,
        incarnation=args.incarnation,
        workdir=args.workdir,
        spill_dir=args.spill_dir,
        shell=json.loads(args.shell),
        limits=limits,
        cgroups=cgroups,
        host_incarnation=args.host_incarnation or "",
    )
    publisher = EventPublisher(pub, codec)
    loop.add_reader(pub_fd, publisher.read_subscriptions)
    idle = IdleTimer(loop, limits.idle_worker_exit_s, stop, lambda: service.table.jobs_left_behind())
    service = WorkerService(
        config, reaper, publisher, on_idle_change=lambda: idle.update(service.table.running_count())
    )
    server = WorkerServer(service, router, codec, on_first_answer)

    watch_runtime_owner(layout.runtime_lock, loop, stop)
    idle.update(0)

    def sweep_spill() -> None:
        remove_stale_spill_files(config.spill_dir, limits.spill_max_age_s)
        loop.call_later(SPILL_SWEEP_SECONDS, sweep_spill)

    sweep_spill()
    serving = asyncio.create_task(server.serve())
    asked = asyncio.create_task(server.shutdown_requested.wait())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, asked, stopped}, return_when=asyncio.FIRST_COMPLETED)
    asked_to_stop = server.shutdown_requested.is_set()
    if not asked_to_stop:
        await service.shutdown()
    _leave_tombstones(
        layout.exit_file(args.worker_id, args.incarnation), service, group_readable=args.group_readable_exits
    )
    if cgroups is not None:
        cgroups.close()  # nothing of this worker's outlives it
    for task in (serving, asked, stopped):
        task.cancel()
    reaper.close()
    loop.remove_reader(pub_fd)
    # Asked to stop, the bye reply may still be queued: closing lingers until it has left
    # (bounded), instead of a guessed sleep.
    router.close(linger=BYE_LINGER_MS if asked_to_stop else 0)
    pub.close(linger=0)
    for endpoint in (request_endpoint, event_endpoint):
        with contextlib.suppress(OSError):
            os.unlink(endpoint.removeprefix("ipc://"))
    return 0


def _announce_ready() -> None:
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    # The supervisor reads one line; afterwards stdout must not hold the pipe open.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _leave_tombstones(path: Path, service: WorkerService, *, group_readable: bool) -> None:
    """Record the final results of this incarnation's sessions, so their handles keep
    answering after a clean exit (docs/sessions.md#after-exit: tombstones live an hour).
    Private to this account, or readable by its group when the gateway is another account
    in that group (docs/sprite.md#privilege-separation)."""
    now = time.monotonic()
    wall_offset = time.time() - now
    stones = {
        handle: tombstones.Tombstone(stone.final, stone.expires_at + wall_offset)
        for handle, stone in service.table.tombstones.items()
        if stone.expires_at > now
    }
    try:
        write = write_group_readable_file if group_readable else write_secret_file
        write(path, tombstones.encode(stones))
    except OSError:
        logging.getLogger("zodex.worker").warning("could not write %s", path)


def main(argv: list[str] | None = None) -> None:
    start(parse_args(argv))


def start(
    args: argparse.Namespace,
    prepared: Prepared | None = None,
    on_first_answer: Callable[[], None] | None = None,
) -> NoReturn:
    """Serve as the worker ``args`` describe, then exit: in a process of its own, or in one
    the worker template forked (prepared ahead of need)."""
    prepared = prepared or prepare()
    with prepared.runner:
        code = prepared.runner.run(run(args, prepared, on_first_answer))
    sys.exit(code)


if __name__ == "__main__":
    main()
