"""``zodex local connect`` started as a client starts it, driven line by line."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from typing import Any

from tests.support.local import ZODEX, LocalEnv
from tests.support.slowdown import scaled

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw-bridge-test", "version": "0"},
}


def modern(params: dict[str, Any] | None = None, version: str = "2026-07-28") -> dict[str, Any]:
    """``params`` with the 2026-07-28 per-request envelope (or another revision's)."""
    return {**(params or {}), "_meta": {**META, "io.modelcontextprotocol/protocolVersion": version}}


class RawBridge:
    def __init__(self, local: LocalEnv, **env: str) -> None:
        self.process = subprocess.Popen(
            [ZODEX, "local", "connect"],
            env=local.env(**env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=str(local.root),
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in iter(self.process.stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(b"")

    def send(self, message: dict[str, Any] | str) -> None:
        assert self.process.stdin is not None
        text = message if isinstance(message, str) else json.dumps(message)
        self.process.stdin.write(text.encode() + b"\n")
        self.process.stdin.flush()

    def next_message(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=scaled(timeout))
        except queue.Empty:
            raise AssertionError(f"no answer within {scaled(timeout)}s") from None
        assert line, "the bridge closed stdout"
        assert line.endswith(b"\n") and b"\n" not in line[:-1], "one message per line"
        message: dict[str, Any] = json.loads(line)
        return message

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return self.next_message()

    def nothing_more(self) -> bool:
        """True when the bridge has written nothing it was not asked for (checked by asking)."""
        probe = {"jsonrpc": "2.0", "id": "nothing-more-probe", "method": "ping"}
        return self.ask(probe).get("id") == "nothing-more-probe"

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            return self.process.wait(scaled(30))
        finally:
            self._reader.join(30)
            assert self.process.stdout is not None
            self.process.stdout.close()
