"""deploy/haproxy/haproxy.cfg as shipped never writes an MCP key to haproxy's log: the
request line is logged as method, path and version (docs/deploy.md#keys, "Keys in logs")."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import httpx2
import pytest

from tests.deploy.test_haproxy_walkthrough import HAPROXY, haproxy_config
from tests.sprite.serve.sprite_support import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

KEY = "2Zfj9b1bSECRETkeyThatMustNotBeLogged0123456789"


def test_the_key_in_the_query_is_not_in_haproxys_log() -> None:
    if not os.access(HAPROXY, os.X_OK):
        pytest.skip(f"{HAPROXY} is missing: scripts/setup.sh --test installs Debian's haproxy")
    front = free_port()
    # No gateway listens there: haproxy answers 503, and logs the request all the same.
    config = Path(tempfile.mkdtemp(prefix="zodex-haproxy-")) / "haproxy.cfg"
    haproxy_config(config, front, {"gateway-1": free_port(), "gateway-2": free_port()})
    log = config.with_name("haproxy.log")
    with log.open("wb") as out:
        proxy = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: _answers(front), timeout=30, what="haproxy to listen")
            answer = httpx2.post(
                f"http://127.0.0.1:{front}/h/b/mcp?key={KEY}",
                headers={"Authorization": f"Bearer {KEY}"},
                json={},
                timeout=10,
            )
            assert answer.status_code == 503
            wait_until(
                lambda: b"/h/b/mcp HTTP/1.1" in log.read_bytes(), timeout=30, what="the request's log line"
            )
        finally:
            proxy.terminate()
            proxy.wait(10)
    text = log.read_text()
    assert '"POST /h/b/mcp HTTP/1.1"' in text
    assert KEY not in text and "key=" not in text
    for leftover in config.parent.iterdir():
        leftover.unlink()
    config.parent.rmdir()


def _answers(port: int) -> bool:
    try:
        httpx2.get(f"http://127.0.0.1:{port}/health", timeout=2)
        return True
    except httpx2.HTTPError:
        return False
