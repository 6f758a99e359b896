"""`zodex local watch --no-open` on a real Local runtime: the CLI, the capability URL, the
Host check, the allowlist, the alias write, the event stream, and the bearer kept back."""

from __future__ import annotations

import signal
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest

from tests.gateway.viewers.watch.live_support import call, watching
from tests.support.local import ZODEX, connected, local_env, observer_bearer
from tests.support.sse import SseStream

pytestmark = pytest.mark.timeout(60)


def test_watch_needs_a_running_local() -> None:
    with local_env() as local:
        done = local.run("local", "watch", "--no-open", check=False)
        assert done.returncode == 1
        assert done.stdout == ""
        assert (
            done.stderr.strip() == f"error: Zodex Local is not running; start it with `{ZODEX} local start`"
        )


def test_agent_and_all_go_with_tui_only() -> None:
    with local_env() as local:
        for args in (("--agent", "ab12"), ("--all",)):
            done = local.run("local", "watch", "--no-open", *args, check=False)
            assert done.returncode == 2 and "--tui" in done.stderr, done.stderr
        both = local.run("local", "watch", "--tui", "--agent", "ab12", "--all", check=False)
        assert both.returncode == 2 and "exclude" in both.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stopping_the_viewer_leaves_the_runtime_running(tmp_path: Path, sig: int) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        with watching(local) as watch:
            parts = urlsplit(watch.url)
            assert parts.hostname == "127.0.0.1" and len(watch.secret) >= 32
            with httpx2.Client(trust_env=False) as client:
                assert client.get(watch.url).status_code == 200
            code, stderr = watch.stop(sig)
            assert (code, stderr) == (0, "")
        assert local.status()["running"] is True


async def test_host_on_a_real_runtime(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        bearer = observer_bearer(local)
        async with connected(local) as mcp:
            named = await call(mcp, "conv-w", "set_agent_alias", alias="watched")
            agent_id = named["agent_id"]
        with watching(local) as watch:
            origin = f"http://127.0.0.1:{watch.port}"
            async with httpx2.AsyncClient(base_url=watch.url, trust_env=False, timeout=30) as client:
                seen: list[httpx2.Response] = []
                wrong = await client.get(f"{origin}/{watch.secret[::-1]}/api/v1/status")
                assert wrong.status_code == 404 and wrong.json() == {
                    "schema_version": 1,
                    "error": "not found",
                }
                rebinding = await client.get(
                    "api/v1/status", headers={"Host": f"attacker.example:{watch.port}"}
                )
                assert rebinding.status_code == 421
                for path in (
                    "api/v1/mcp",
                    "api/v1/agents/x/alias",
                    "api/v1/status/",
                    "../mcp",
                    "api/v1/events/x",
                ):
                    reply = await client.get(path)
                    assert reply.status_code == 404, path
                    seen.append(reply)
                status = await client.get("api/v1/status")
                assert (
                    status.status_code == 200
                    and status.json()["runtime_id"] == local.discovery()["runtime_id"]
                )
                assert status.headers["cache-control"] == "no-store"
                renamed = await client.put(
                    f"api/v1/agents/{agent_id}/alias", json={"alias": "renamed in the browser"}
                )
                assert renamed.status_code == 200, renamed.text
                agents = (await client.get("api/v1/agents")).json()["agents"]
                assert [(a["agent_id"], a["alias"]) for a in agents] == [(agent_id, "renamed in the browser")]
                seen += [status, renamed]
                async with client.stream("GET", "api/v1/events") as response:
                    assert response.status_code == 200
                    assert response.headers["content-type"].startswith("text/event-stream")
                    stream = SseStream(response)
                    async with connected(local) as mcp:
                        ran = await call(
                            mcp, "conv-w", "exec_command", cmd="echo proxied", workdir=str(tmp_path)
                        )
                    assert ran["output"] == "proxied\n"
                    record = await stream.until(
                        lambda e: (
                            e["event_type"] == "presentation_updated"
                            and e["payload"].get("command") == "echo proxied"
                            and e["payload"]["status"] == "exited"
                        )
                    )
                    assert record["agent_id"] == agent_id
                    for name, value in response.headers.items():
                        assert bearer not in value and "bearer" not in value.lower(), name
                # A rotated bearer is picked up on the viewer's next request.
                local.run("local", "setup", "--rotate-observability-bearer")
                rotated = observer_bearer(local)
                assert rotated != bearer
                after = await client.get("api/v1/agents")
                assert after.status_code == 200, after.text
                seen.append(after)
                for reply in seen:
                    assert bearer not in reply.text and rotated not in reply.text
                    for name, value in reply.headers.items():
                        assert bearer not in value and "bearer" not in value.lower(), name
                        assert not name.startswith("access-control-"), name
