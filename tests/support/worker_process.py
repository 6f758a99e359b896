"""A real ``zodex-worker`` process started by hand, the way the gateway's supervisor does,
and raw ZeroMQ sockets to talk to it with nothing but :class:`~zodex_protocol.WireCodec`.

The test plays the runtime's owner: it creates the runtime directory and key and holds
``runtime.lock`` exclusively until :meth:`WorkerProcess.release_owner_lock` or the end.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from tests.support.slowdown import scaled
from zodex_protocol import messages
from zodex_protocol.envelope import Envelope, WireCodec, new_key
from zodex_protocol.handles import worker_id_for
from zodex_protocol.layout import RuntimeLayout, WorkerRecord
from zodex_system.secret_files import create_secret_file

READY_TIMEOUT_S = 20.0
SHELL = ["/bin/bash", "-c"]


@dataclass
class WorkerProcess:
    root: Path
    layout: RuntimeLayout
    key: bytes
    workdir: str
    worker_id: str
    incarnation: int
    process: subprocess.Popen[bytes]
    record: WorkerRecord
    lock_fd: int | None
    context: zmq.Context[zmq.Socket[bytes]] = field(default_factory=zmq.Context)
    sockets: list[zmq.Socket[bytes]] = field(default_factory=list)

    def release_owner_lock(self) -> None:
        """Act as an owner that went away: closing the fd drops the exclusive flock."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def wait_exit(self, timeout: float = 15.0) -> int:
        return self.process.wait(scaled(timeout))

    @property
    def exit_file(self) -> Path:
        return self.layout.exit_file(self.worker_id, self.incarnation)

    def dealer(self, codec: WireCodec | None = None) -> RawDealer:
        socket = self._socket(zmq.DEALER)
        socket.connect(self.record.request_endpoint)
        return RawDealer(socket, codec or WireCodec(self.key))

    def subscriber(self) -> EventSubscriber:
        socket = self._socket(zmq.SUB)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(self.record.event_endpoint)
        return EventSubscriber(socket, WireCodec(self.key))

    def _socket(self, kind: int) -> zmq.Socket[bytes]:
        socket = self.context.socket(kind)
        socket.setsockopt(zmq.LINGER, 0)
        self.sockets.append(socket)
        return socket

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.release_owner_lock()
        for socket in self.sockets:
            socket.close(linger=0)
        self.context.term()
        shutil.rmtree(self.root, ignore_errors=True)


def start_worker(limits: dict[str, int] | None = None, incarnation: int = 1) -> WorkerProcess:
    # Short path: ipc endpoints are limited to ~100 characters.
    root = Path(tempfile.mkdtemp(prefix="zx", dir="/tmp"))
    layout = RuntimeLayout(root / "rt")
    layout.create()
    key = new_key()
    create_secret_file(layout.key_file, key)
    lock_fd = os.open(layout.runtime_lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    workdir = os.path.realpath(root / "wd")
    os.mkdir(workdir)
    worker_id = worker_id_for(workdir)
    argv = [
        sys.executable, "-m", "zodex_worker.main",
        "--runtime-dir", str(layout.root),
        "--workdir", workdir,
        "--worker-id", worker_id,
        "--incarnation", str(incarnation),
        "--spill-dir", str(root / "spill"),
        "--shell", json.dumps(SHELL),
        "--limits", json.dumps(limits or {}),
    ]  # fmt: skip
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True, cwd=str(root)
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT_S)
    line = process.stdout.readline() if ready else b""
    record = WorkerRecord.read(layout.record_file(worker_id))
    if line.strip() != b"READY" or record is None:
        process.kill()
        process.wait(10)
        process.stdout.close()
        os.close(lock_fd)
        shutil.rmtree(root, ignore_errors=True)
        raise AssertionError(f"worker did not start: first line {line!r}, record {record!r}")
    return WorkerProcess(root, layout, key, workdir, worker_id, incarnation, process, record, lock_fd)


@contextlib.contextmanager
def running_worker(limits: dict[str, int] | None = None) -> Iterator[WorkerProcess]:
    worker = start_worker(limits)
    try:
        yield worker
    finally:
        worker.stop()


class RawDealer:
    """One DEALER: send envelopes (or hand-made frames), receive replies with a bound."""

    def __init__(self, socket: zmq.Socket[bytes], codec: WireCodec) -> None:
        self.socket = socket
        self.codec = codec

    def send(self, envelope: Envelope, codec: WireCodec | None = None) -> Envelope:
        self.socket.send_multipart((codec or self.codec).serialize(envelope))
        return envelope

    def send_frames(self, frames: list[bytes]) -> None:
        self.socket.send_multipart(frames)

    def recv(self, timeout: float = 10.0) -> Envelope:
        if not self.socket.poll(int(scaled(timeout) * 1000)):
            raise AssertionError(f"no reply within {scaled(timeout)}s")
        return self.codec.deserialize(self.socket.recv_multipart())

    def request(self, type: str, body: Any, timeout: float = 10.0) -> Envelope:
        sent = self.send(Envelope(type=type, body=body))
        reply = self.recv(timeout)
        assert reply.reply_to == sent.id, (reply, sent)
        return reply

    def exec(self, cmd: str, workdir: str, **args: Any) -> dict[str, Any]:
        reply = self.request(messages.EXEC, {"cmd": cmd, "workdir": workdir, **args}, timeout=30)
        assert reply.type == messages.RESULT, reply
        body: dict[str, Any] = reply.body
        return body


class EventSubscriber:
    def __init__(self, socket: zmq.Socket[bytes], codec: WireCodec) -> None:
        self.socket = socket
        self.codec = codec
        self.welcomed = False

    def next(self, deadline: float) -> tuple[str, Envelope] | None:
        """The next event as ``(topic, envelope)``, or None once ``deadline`` (monotonic) passed."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.socket.poll(int(remaining * 1000)):
                return None
            topic, *frames = self.socket.recv_multipart()
            if topic == messages.WELCOME and not frames:
                self.welcomed = True  # the subscription is live from here on
                continue
            return topic.decode(), self.codec.deserialize(frames)
