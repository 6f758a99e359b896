"""FIFO handshakes for a command that must still be running when a call returns.

Instead of a ``sleep 0.3`` that a loaded machine can outlast before the yield window ends,
the command blocks at ``gate.wait`` (reading one line from a FIFO) until the test calls
:meth:`Gate.release` — after it has seen the call return ``running``. A gate opens once; a
command that must stop twice uses two gates.
"""

from __future__ import annotations

import errno
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.support.gateway import wait_for
from tests.support.waiting import wait_until


@dataclass(frozen=True)
class Gate:
    path: Path

    @classmethod
    def make(cls, directory: Path, name: str = "gate", mode: int = 0o600) -> Gate:
        """A FIFO ``<name>.fifo`` in ``directory``; ``mode`` lets another account's command
        (Sprite's agent) read it."""
        path = directory / f"{name}.fifo"
        os.mkfifo(path)
        os.chmod(path, mode)  # exactly, whatever the umask
        return cls(path)

    @property
    def wait(self) -> str:
        """Shell that blocks until :meth:`release`."""
        return f"read -r _ < {shlex.quote(str(self.path))}"

    def wait_from(self, workdir: Path) -> str:
        """:attr:`wait` for a command that runs in ``workdir``: a shorter line to show."""
        return f"read -r _ < {shlex.quote(str(self.path.relative_to(workdir)))}"

    def _opened(self) -> bool:
        # Without a reader a non-blocking open fails (ENXIO): the command has not reached
        # the gate yet. Written once it has, the line is what its read returns on.
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return False
            raise
        try:
            os.write(fd, b"\n")
        finally:
            os.close(fd)
        return True

    async def release(self, timeout: float = 20.0) -> None:
        """Let the command past the gate, once it waits there (bounded, scaled wait)."""
        await wait_for(self._opened, timeout, what=f"the command to wait at {self.path.name}")

    def release_now(self, timeout: float = 20.0) -> None:
        """:meth:`release` for synchronous tests."""
        wait_until(self._opened, timeout, what=f"the command to wait at {self.path.name}")
