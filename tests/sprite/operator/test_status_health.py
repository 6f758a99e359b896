"""`zodex sprite status` and `health` against a real `zodex sprite serve` on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.sprite.operator.conftest import Sprite
from tests.sprite.operator.test_commands import ZODEX_MAIN
from tests.sprite.operator.test_setup import one_line_error
from tests.support.accounts import runnable_install
from tests.support.gateway import http_client
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def status(sprite: Sprite) -> dict[str, object]:
    found: dict[str, object] = json.loads(sprite.run("status", "--json").stdout)
    return found


@pytest.fixture
def served(sprite: Sprite) -> Iterator[tuple[Sprite, subprocess.Popen[str], int]]:
    port = free_port()
    done = sprite.setup(port=port)
    assert done.returncode == 0, done.stderr
    # The service drops root for the service account, which cannot read this test's Python
    # (it lives under root's 0700 home): serve from a Python every account can run.
    with runnable_install() as venv:
        yield from _serve(sprite, venv / "bin" / "python3", port)


def _serve(sprite: Sprite, python: object, port: int) -> Iterator[tuple[Sprite, subprocess.Popen[str], int]]:
    service = subprocess.Popen(
        [str(python), "-c", ZODEX_MAIN, "sprite", "serve", "--config", str(sprite.config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        wait_until(
            lambda: service.poll() is not None or status(sprite)["running"] is True,
            timeout=30,
            what="the service to write its status",
        )
        assert service.poll() is None, service.stderr.read() if service.stderr else ""
        yield sprite, service, port
    finally:
        service.terminate()
        try:
            service.wait(30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(10)
        if service.stderr is not None:
            service.stderr.close()


def test_status_and_health_of_a_running_service(served: tuple[Sprite, subprocess.Popen[str], int]) -> None:
    sprite, service, port = served
    info = status(sprite)
    assert info["running"] is True and info["reason"] == ""
    assert (info["pid"], info["port"], info["agent_user"]) == (service.pid, port, sprite.agent)
    assert info["public_url"] == f"http://sprite.test:{port}"
    assert isinstance(info["version"], str) and info["version"]
    assert info["active_sessions"] == 0

    shown = sprite.run("status")
    assert shown.returncode == 0, shown.stderr
    assert f"Zodex Sprite is running (pid {service.pid}" in shown.stdout
    assert f"agent account:   {sprite.agent}" in shown.stdout

    healthy = sprite.run("health")
    assert healthy.returncode == 0, healthy.stderr
    assert f"tools apply_patch, exec_command, write_stdin at http://127.0.0.1:{port}" in healthy.stdout


async def test_status_counts_active_sessions(served: tuple[Sprite, subprocess.Popen[str], int]) -> None:
    sprite, _service, port = served
    key = sprite.key_file.read_text().strip()
    async with http_client(f"http://127.0.0.1:{port}/mcp?key={key}", {}) as mcp:
        for _ in range(2):
            started = await mcp.exec(
                "sleep 60", workdir=str(sprite.workspace), yield_time_ms=100, timeout_ms=60_000
            )
            assert started.get("session_handle"), started
        wait_until(lambda: status(sprite)["active_sessions"] == 2, timeout=10, what="two active sessions")


def test_health_follows_a_rotated_key(served: tuple[Sprite, subprocess.Popen[str], int]) -> None:
    sprite, _service, _port = served
    assert sprite.run("rotate-key").returncode == 0
    # health reads the new key; the service must take it within 5 s (docs/sprite.md#operator-cli).
    wait_until(lambda: sprite.run("health").returncode == 0, timeout=5, what="health with the new key")


def test_health_of_a_stopped_service_fails_in_one_line(
    served: tuple[Sprite, subprocess.Popen[str], int],
) -> None:
    sprite, service, port = served
    service.terminate()
    service.wait(30)
    one_line_error(sprite.run("health"), f"GET http://127.0.0.1:{port}/health failed")
    one_line_error(sprite.run("status"), "Zodex Sprite is not running")


def test_health_with_a_wrong_key_fails_in_one_line(served: tuple[Sprite, subprocess.Popen[str], int]) -> None:
    sprite, _service, port = served
    from zodex_gateway.sprite.health import HealthError, check_health
    from zodex_gateway.sprite.settings import load_settings

    with pytest.raises(HealthError) as caught:
        check_health(load_settings(sprite.config), "x" * 43)
    assert f"MCP tools/list at http://127.0.0.1:{port}/mcp failed" in str(caught.value)
    assert "\n" not in str(caught.value)


IMPOSTOR = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def _answer(self):
        print(self.command, self.path, flush=True)
        body = json.dumps({"status": "ok", "component": "zodex-sprite", "version": "0"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _answer
    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("listening", flush=True)
server.serve_forever()
"""


def test_health_never_sends_the_key_to_a_listener_of_another_account(
    served: tuple[Sprite, subprocess.Popen[str], int],
) -> None:
    """The service stopped and a process of the agent took its port, answering /health as
    the service would: health refuses before the MCP request, so the key is never sent."""
    sprite, service, port = served
    service.terminate()
    service.wait(30)
    impostor = subprocess.Popen(
        ["setpriv", f"--reuid={sprite.agent}", f"--regid={sprite.agent}", "--clear-groups",
         "/usr/bin/python3", "-c", IMPOSTOR, str(port)],
        stdout=subprocess.PIPE, text=True, cwd="/",
    )  # fmt: skip
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "listening\n"
        refused = sprite.run("health")
        one_line_error(refused, f"port {port} is listened on by {sprite.agent} (uid ")
        assert f"not only by the service ({sprite.service} or root); the key was not sent" in refused.stderr
    finally:
        impostor.terminate()
        asked, _ = impostor.communicate(timeout=30)
    assert asked.splitlines() == ["GET /health"], "nothing but /health reached it: no key"
