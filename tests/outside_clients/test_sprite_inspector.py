"""MCP Inspector's CLI (pinned in package-lock.json) against a real ``zodex sprite serve``, as
an operator would connect it: the URL ``zodex sprite connect`` prints, with the key as
``?key=``, over ``--transport http``. It lists exactly the three tools and ``id -un`` runs
as the agent account (root only: Sprite starts commands as another account)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sprite.serve.sprite_support import Sprite, sprite_setup
from tests.support.accounts import require_root
from tests.support.outside_clients import TIMEOUT, installed

pytestmark = pytest.mark.timeout(120)  # each Inspector run starts Node


@pytest.fixture(scope="module")
def sprite() -> Iterator[Sprite]:
    require_root()
    installed()  # skip before making accounts when npm is unreachable
    with sprite_setup(start=False) as made:
        made.write_config(**{"public-url": f"http://127.0.0.1:{made.port}"})
        made.start()
        yield made


def connector_url(sprite: Sprite) -> str:
    """What ``zodex sprite connect`` prints for the operator to paste into a client."""
    argv = [*sprite.argv()[:-3], "connect", "--config", str(sprite.config)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stderr
    url = done.stdout.strip()
    assert url == f"{sprite.url}/mcp?key={sprite.key}"
    return url


def inspector(sprite: Sprite, url: str, *method: str) -> subprocess.CompletedProcess[str]:
    home = sprite.base / "inspector-home"
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [str(installed() / "mcp-inspector"), "--cli", url, *method, "--transport", "http"],
        env={"HOME": str(home), "PATH": f"{installed()}{os.pathsep}/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=str(home),
    )


def test_inspector_lists_three_tools_and_runs_id_as_the_agent(sprite: Sprite) -> None:
    url = connector_url(sprite)
    listed = inspector(sprite, url, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    assert sorted(tool["name"] for tool in json.loads(listed.stdout)["tools"]) == [
        "apply_patch",
        "exec_command",
        "write_stdin",
    ]
    ran = inspector(
        sprite,
        url,
        "--method",
        "tools/call",
        "--tool-name",
        "exec_command",
        "--tool-arg",
        "cmd=id -un",
        f"workdir={sprite.workspace}",
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["isError"] is False, result
    structured = result["structuredContent"]
    assert (structured["status"], structured["exit_code"]) == ("exited", 0), structured
    assert structured["output"] == f"{sprite.agent.name}\n"


def test_inspector_with_a_wrong_key_is_refused_and_runs_nothing(sprite: Sprite) -> None:
    marker = sprite.workspace / "ran-with-a-wrong-key"
    wrong = sprite.key[:-1] + ("A" if sprite.key[-1] != "A" else "B")
    for url in (f"{sprite.url}/mcp?key={wrong}", f"{sprite.url}/mcp"):
        done = inspector(
            sprite,
            url,
            "--method",
            "tools/call",
            "--tool-name",
            "exec_command",
            "--tool-arg",
            f"cmd=touch {marker}",
            f"workdir={sprite.workspace}",
        )
        assert done.returncode != 0, done.stdout
        # A 401 is, to an MCP client, a server that wants OAuth: Inspector says so and stops.
        assert '"code":"auth_required"' in done.stderr, done.stderr
    assert not Path(marker).exists()
