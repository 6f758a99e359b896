"""`zodex local start | stop | status | config | logs` against real runtimes (mcp-config and
connect: test_client_config.py, test_connect.py)."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import httpx2
import pytest

from tests.support.gateway import http_client, pid_alive, wait_for
from tests.support.local import ZODEX, local_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)


async def test_start_serve_status_stop(tmp_path: Path) -> None:
    with local_env() as local:
        started = local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        url = discovery["mcp"]["url"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        assert url in started.stdout and "mcp-config" in started.stdout
        assert discovery["schema_version"] == 1
        assert discovery["start_directory"] == os.path.realpath(tmp_path)
        assert discovery["expires_at"] is None
        assert set(discovery) >= {"runtime_id", "pid", "started_at", "mcp", "observability"}
        token_path = Path(discovery["mcp"]["token_path"])
        token = token_path.read_text().strip()
        assert len(token) == 64 and stat.S_IMODE(token_path.stat().st_mode) == 0o600

        assert httpx2.post(url, json={}, timeout=10).status_code == 401
        async with http_client(url, {"X-Zodex-Local-Token": token}) as mcp:
            assert str(tmp_path) in (mcp.client.instructions or "") or os.path.realpath(tmp_path) in (
                mcp.client.instructions or ""
            )
            running = await mcp.exec("sleep 30", str(tmp_path), yield_time_ms=50)
            status = local.status()
            assert status["running"] is True
            assert status["runtime_id"] == discovery["runtime_id"]
            assert status["observer_url"] == discovery["observability"]["base_url"]
            assert status["active_process_count"] == 1
            await mcp.write(running["session_handle"], kill_process=True)
            assert local.status()["active_process_count"] == 0

        stopped = local.run("local", "stop")
        assert "stopped" in stopped.stdout
        assert not local.discovery_file.exists()
        assert not pid_alive(discovery["pid"])
        assert local.status() == {"running": False, "active_process_count": 0}
        assert "not running" in local.run("local", "stop").stdout  # safe to repeat


def test_second_start_reports_the_active_runtime(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        first = local.discovery()
        again = local.run("local", "start", "/")
        assert again.returncode == 0
        assert "already running" in again.stdout and first["runtime_id"] in again.stdout
        assert local.discovery() == first


async def test_captured_environment_and_shell_reach_commands(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path), ZODEX_TEST_MARK="from-start-shell")
        discovery = local.discovery()
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        async with http_client(discovery["mcp"]["url"], {"X-Zodex-Local-Token": token}) as mcp:
            r = await mcp.exec("echo $ZODEX_TEST_MARK; echo $0; echo $PAGER", str(tmp_path))
        assert r["output"] == "from-start-shell\n/bin/bash\ncat\n"


def test_ttl_expiry_stops_like_stop(tmp_path: Path) -> None:
    with local_env() as local:
        started = local.run("local", "start", str(tmp_path), "--ttl", "2s")
        discovery = local.discovery()
        assert discovery["expires_at"] is not None
        assert "expires" in started.stdout
        wait_until(lambda: not local.discovery_file.exists(), 20, "the runtime to unpublish itself at expiry")
        wait_until(lambda: not pid_alive(discovery["pid"]), 20, "the runtime to exit at expiry")
        assert local.status()["running"] is False


def test_bad_ttl_is_refused(tmp_path: Path) -> None:
    with local_env() as local:
        done = local.run("local", "start", str(tmp_path), "--ttl", "soon", check=False)
        assert done.returncode == 2 and "--ttl" in done.stderr
        assert not local.discovery_file.exists()


def test_config_set_is_refused_while_running(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "config", "set", "session.timeout", "30min")
        local.run("local", "start", str(tmp_path))
        refused = local.run("local", "config", "set", "session.timeout", "1h", check=False)
        assert refused.returncode == 2
        assert f"stop it with `{ZODEX} local stop`" in refused.stderr
        assert local.run("local", "config", "get", "session.timeout").stdout.strip() == "30min"
        local.run("local", "stop")
        local.run("local", "config", "set", "session.timeout", "1h")
        assert local.run("local", "config", "get", "session.timeout").stdout.strip() == "1h"
        bad = local.run("local", "config", "set", "session.timeout", "forever", check=False)
        assert bad.returncode == 2 and bad.stderr.startswith("error: ")


async def test_sigkill_of_the_runtime_then_stop_kills_leftovers(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        token = Path(discovery["mcp"]["token_path"]).read_text().strip()
        async with http_client(discovery["mcp"]["url"], {"X-Zodex-Local-Token": token}) as mcp:
            r = await mcp.exec(
                "trap '' HUP TERM; setsid sleep 300 & echo esc=$!; echo ready; sleep 300",
                str(tmp_path),
                yield_time_ms=1000,
            )
        escapee = int(r["output"].split("esc=")[1].split()[0])
        os.kill(discovery["pid"], signal.SIGKILL)
        await wait_for(lambda: not pid_alive(discovery["pid"]), what="the runtime to die")
        assert local.discovery_file.exists(), "a crashed runtime leaves its discovery file"
        local.run("local", "stop")
        await wait_for(lambda: not pid_alive(escapee), what="stop to kill the leftover command")
        assert not local.discovery_file.exists()


def test_start_that_fails_leaves_nothing_running(tmp_path: Path) -> None:
    with local_env() as local:
        config = local.root / "config" / "zodex"
        config.mkdir(parents=True)
        (config / "local.toml").write_text("[session]\ntimeout = 'never'\n")
        done = local.run("local", "start", str(tmp_path), check=False)
        assert done.returncode == 1
        assert "failed to start" in done.stderr
        assert not local.discovery_file.exists()
        assert local.status()["running"] is False
        runtime_root = local.root / "run" / "zodex"
        assert not runtime_root.exists() or list(runtime_root.iterdir()) == []


def test_tunnel_runs_with_the_runtime(tmp_path: Path) -> None:
    with local_env() as local:
        out = local.root / "tunnel.out"
        script = local.root / "fake-tunnel.sh"
        script.write_text(
            f'#!/bin/sh\necho "$ZODEX_MCP_URL $ZODEX_TUNNEL_ID ${{#ZODEX_MCP_TOKEN}} $$" > {out}\nexec sleep 300\n'
        )
        script.chmod(0o755)
        local.run("local", "setup", "--tunnel-command", str(script), "--tunnel-id", "tid-1")
        local.run("local", "start", str(tmp_path))
        wait_until(lambda: out.exists() and out.read_text().endswith("\n"), 10, "the tunnel to start")
        url, tunnel_id, token_len, pid = out.read_text().split()
        assert url == local.discovery()["mcp"]["url"]
        assert tunnel_id == "tid-1" and token_len == "64"
        assert pid_alive(int(pid))
        local.run("local", "stop")
        wait_until(lambda: not pid_alive(int(pid)), 10, "the tunnel to be stopped")


def test_logs(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        discovery = local.discovery()
        logs = local.run("local", "logs", "--lines", "20").stdout
        assert discovery["runtime_id"] in logs


def test_help_explains_every_command() -> None:
    with local_env() as local:
        for command in ("setup", "start", "stop", "status", "config", "logs", "mcp-config", "connect"):
            done = local.run("local", command, "--help")
            assert "Usage:" in done.stdout and len(done.stdout.splitlines()) > 3
