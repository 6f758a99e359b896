"""A bare JSON-RPC driver for a stdio gateway, for tests that must control the process
itself (close its stdin, signal it) rather than go through the client's lifecycle."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
from typing import Any

from tests.support.gateway import GATEWAY, GatewayEnv
from tests.support.slowdown import scaled


class RawStdioGateway:
    def __init__(self, env: GatewayEnv, *, handshake: bool = True) -> None:
        """``handshake``: send ``initialize`` and ``notifications/initialized`` first."""
        self.process = subprocess.Popen(
            [GATEWAY, "stdio"],
            env=env.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(env.root),
        )
        self._next_id = 0
        if not handshake:
            return
        self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        })  # fmt: skip
        self.notify("notifications/initialized")

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def send_line(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def next_message(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next line the gateway writes, parsed; fails (instead of hanging) if none comes."""
        assert self.process.stdout is not None
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            reading = pool.submit(self.process.stdout.readline)
            try:
                line = reading.result(scaled(timeout))
            except concurrent.futures.TimeoutError:
                self.finish()  # ends the blocked read
                raise AssertionError(f"no answer within {scaled(timeout)}s") from None
        assert line, "gateway closed stdout"
        message: dict[str, Any] = json.loads(line)
        return message

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            assert line, "gateway closed stdout"
            message = json.loads(line)
            if message.get("id") == self._next_id:
                result: dict[str, Any] = message["result"]
                return result

    def call(self, tool: str, **args: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": args})

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def finish(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()
