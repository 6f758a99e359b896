"""Evidence that a poll reached its worker and is waiting there, instead of a sleep "so the
poll is in flight" that passes the same when it is not.

The probe's command prints ``ready``, then reads one typed line (with echo off, so typing
makes no output that would end the poll), touches a marker file, and stays silent until
:meth:`PollProbe.release` writes to its FIFO; then it prints ``released`` and exits. A poll
that types :data:`TYPED` is therefore waiting in the worker once :meth:`PollProbe.reached`
holds, and it returns when the test releases the command (or kills it, or its worker).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

TYPED = "go\n"


@dataclass(frozen=True)
class PollProbe:
    marker: Path
    fifo: Path

    @classmethod
    def make(cls, directory: Path, name: str = "probe") -> PollProbe:
        fifo = directory / f"{name}.fifo"
        os.mkfifo(fifo, 0o600)
        return cls(directory / f"{name}.polled", fifo)

    @property
    def command(self) -> str:
        # Opened read-write, the FIFO never blocks the shell and is open before the marker
        # exists, so release() cannot find it without a reader.
        fifo, marker = shlex.quote(str(self.fifo)), shlex.quote(str(self.marker))
        return f"exec 3<>{fifo}; stty -echo; echo ready; read -r line; touch {marker}; read -r line <&3; echo released"

    def reached(self) -> bool:
        return self.marker.exists()

    def release(self) -> None:
        fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, b"\n")
        finally:
            os.close(fd)
