"""Run a full-screen program in a real pseudo-terminal and read its screen through pyte."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Callable, Sequence

import pyte

from tests.support.slowdown import scaled
from tests.support.waiting import wait_until

# Keys as a terminal sends them.
ENTER = "\r"
ESC = "\x1b"
TAB = "\t"


class PtyScreen:
    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: str | None = None,
        cols: int = 120,
        rows: int = 40,
    ) -> None:
        self.cols, self.rows = cols, rows
        self.screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self.screen)
        self._lock = threading.Lock()
        self._raw: list[bytes] = []
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self._master = master
        self.process = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)},
            cwd=cwd,
            start_new_session=True,  # the pty becomes its controlling terminal
            close_fds=True,
        )
        os.close(slave)
        self._reader = threading.Thread(target=self._read, name="pty-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self._master], [], [], 0.2)
                if not ready:
                    if self.process.poll() is not None:
                        return
                    continue
                data = os.read(self._master, 65536)
            except OSError:
                return  # EIO: every slave end is closed
            if not data:
                return
            with self._lock:
                self._raw.append(data)
                self._stream.feed(data)

    def text(self) -> str:
        with self._lock:
            return "\n".join(line.rstrip() for line in self.screen.display)

    def send(self, keys: str) -> None:
        os.write(self._master, keys.encode())

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = 15.0) -> str:
        """The screen text once ``predicate`` holds for it; else fail showing the screen."""
        seen: list[str] = []

        def holds() -> bool:
            text = self.text()
            seen[:] = [text]
            if predicate(text):
                return True
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the program exited ({self.process.returncode}) waiting for {what}:\n{text}"
                )
            return False

        try:
            wait_until(holds, timeout, what)
        except AssertionError as exc:
            if self.process.poll() is not None:
                raise
            raise AssertionError(f"{exc}; the screen:\n{seen[-1]}") from None
        return seen[-1]

    def wait_text(self, needle: str, timeout: float = 15.0) -> str:
        return self.wait_for(lambda text: needle in text, repr(needle), timeout)

    def wait_gone(self, needle: str, timeout: float = 15.0) -> str:
        return self.wait_for(lambda text: needle not in text, f"{needle!r} to go", timeout)

    def wait_exit(self, timeout: float = 15.0) -> int:
        return self.process.wait(scaled(timeout))

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(10)
        self._reader.join(5)
        os.close(self._master)

    def __enter__(self) -> PtyScreen:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
