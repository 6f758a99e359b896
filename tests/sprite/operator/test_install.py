"""The Zodex `zodex sprite setup` installs under sprite.install-dir, as a new operator uses
it: the service account runs that `zodex`, a real `serve` started from it answers through
the mcp SDK as the agent, and `serve` started from a Python the service account cannot read
refuses at start naming it (docs/sprite.md#files-and-modes)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from scripts import fleet_harness
from tests.sprite.operator.conftest import Sprite
from tests.sprite.operator.test_commands import ZODEX_MAIN
from tests.sprite.operator.test_setup import one_line_error, owner_mode, tree
from tests.sprite.operator.test_status_health import free_port
from tests.sprite.serve.sprite_support import tool_json
from tests.support.accounts import PROJECT_ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def as_service(sprite: Sprite, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", sprite.service, "--", "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        timeout=60,
    )


@contextlib.contextmanager
def serving(argv: list[str], port: int) -> Iterator[subprocess.Popen[str]]:
    service = subprocess.Popen(
        argv, env=CLEAN_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd="/"
    )

    def healthy() -> bool:
        if service.poll() is not None:
            raise AssertionError(f"serve exited {service.returncode}: {service.stderr.read()}")  # type: ignore[union-attr]
        try:
            return httpx2.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        except httpx2.HTTPError:
            return False

    try:
        wait_until(healthy, timeout=60, what="the installed zodex to serve /health")
        yield service
    finally:
        service.terminate()
        try:
            service.wait(30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(10)
        assert service.stderr is not None
        service.stderr.close()


async def test_setup_installs_a_zodex_that_serves_as_a_new_operator_runs_it(sprite: Sprite) -> None:
    port = free_port()
    done = sprite.setup(port=port)
    assert done.returncode == 0, done.stderr
    zodex = sprite.install / "bin" / "zodex"
    assert owner_mode(zodex) == ("root", "root", 0o755)
    assert done.stdout.splitlines()[-1] == (
        f"from now on use {zodex} for zodex sprite commands (e.g. {zodex} sprite status): "
        "it is the Zodex the service runs"
    )
    unit = (sprite.config.parent / f"zodex-sprite-{sprite.service}.service").read_text()
    assert f"\nExecStart={zodex} sprite serve --config {sprite.config}\n" in unit

    # The whole of Zodex and what it requires, from the installation alone, as the service account.
    imported = as_service(
        sprite,
        str(sprite.install / "bin" / "python3"),
        "-I",
        "-c",
        "import sys, importlib.metadata as m, zodex_gateway.sprite.service, zodex_gateway.cli, "
        "concurrent.futures.thread, zodex_worker.main, mcp, uvicorn, jwt, cryptography; "
        "print(m.version('zodex'), sys.prefix, zodex_gateway.cli.__file__)",
    )
    assert imported.returncode == 0, imported.stderr
    version, prefix, cli_file = imported.stdout.split()
    assert version == importlib.metadata.version("zodex")
    assert prefix == str(sprite.install)
    assert Path(cli_file).is_relative_to(sprite.install), "imported from the copy, not the checkout"
    shown = as_service(sprite, str(zodex), "sprite", "status", "--json", "--config", str(sprite.config))
    assert shown.returncode == 1 and '"running": false' in shown.stdout, (shown.stdout, shown.stderr)
    planted = sprite.as_agent("touch", str(sprite.install / "bin" / "planted"))
    assert planted.returncode != 0, "the agent cannot change the code root runs"

    # The command setup printed and the unit runs, for real: a tool call runs as the agent.
    key = sprite.key_file.read_text().strip()
    with serving([str(zodex), "sprite", "serve", "--config", str(sprite.config)], port):
        async with (
            httpx2.AsyncClient(timeout=30) as http,
            streamable_http_client(f"http://127.0.0.1:{port}/mcp?key={key}", http_client=http) as (
                read,
                write,
            ),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = tool_json(await session.call_tool("exec_command", {"cmd": "id -un", "workdir": "/"}))
    assert result["output"].strip() == sprite.agent


def test_setup_again_refreshes_the_installation(ready_sprite: Sprite) -> None:
    sprite = ready_sprite
    key = sprite.key_file.read_text()
    site = next((sprite.install / "lib").glob("python3.*/site-packages"))
    stray = site / "zodex_gateway" / "stray.py"
    stray.write_text("raise SystemExit('left over')\n")
    (site / "zodex_gateway" / "cli.py").write_text("broken(\n")

    again = sprite.run("setup")
    assert again.returncode == 0, again.stderr
    assert not stray.exists(), "the copy is made afresh"
    assert sprite.key_file.read_text() == key
    assert [p.name for p in sprite.install.parent.iterdir() if p.name.startswith(".")] == []
    runs = as_service(sprite, str(sprite.install / "bin" / "zodex"), "--version")
    assert runs.returncode == 0 and runs.stdout.startswith("zodex, version"), runs.stderr


@contextlib.contextmanager
def venv_in(mode: int) -> Iterator[tuple[Path, Path]]:
    """A venv from the system's Python with the project importable, inside a root-owned
    directory of ``mode``: what a pyenv build or a venv under root's ``0700`` home is to
    the service account. Yields (the directory, the venv's python)."""
    base = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(base, os.X_OK):
        pytest.skip(f"no {base} to make a venv from")
    closed = Path(tempfile.mkdtemp(prefix="zodex-closed-", dir="/tmp"))
    try:
        venv = closed / "venv"
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
        site = next((venv / "lib").glob("python3.*/site-packages"))
        paths = [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        # Where the service account can reach them: only the venv's own directory is closed.
        reached = [fleet_harness.reachable(path) for path in dict.fromkeys(paths)]
        (site / "zodex-tests.pth").write_text("\n".join(reached) + "\n")
        closed.chmod(mode)
        yield closed, venv / "bin" / "python3"
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_serve_from_a_python_the_service_cannot_read_refuses_naming_the_installed_zodex(
    ready_sprite: Sprite,
) -> None:
    sprite = ready_sprite
    installed = f"{sprite.install}/bin/zodex sprite serve --config {sprite.config}"
    with venv_in(0o700) as (closed, python):
        serve = [str(python), "-c", ZODEX_MAIN, "sprite", "serve", "--config", str(sprite.config)]
        refused = subprocess.run(serve, env=CLEAN_ENV, capture_output=True, text=True, cwd="/", timeout=60)
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.splitlines() == [
            f"zodex sprite serve: the service account {sprite.service} could not read "
            f"{next((closed / 'venv' / 'lib').glob('python3.*/site-packages'))} ({closed} is 0700), which "
            f"this zodex imports from, once it drops root: run {installed}"
        ]
        assert not (sprite.state / "status.json").exists()

        # The same Python where the service account can read it passes the check: the
        # refusal is about the modes (here serve goes on to find its port taken).
        closed.chmod(0o755)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            config = sprite.config.read_text()
            sprite.config.write_text(config.replace("port = 18080\n", f"port = {port}\n"))
            passed = subprocess.run(serve, env=CLEAN_ENV, capture_output=True, text=True, cwd="/", timeout=60)
        assert passed.returncode == 1
        assert passed.stderr.splitlines() == [
            f"zodex sprite serve: cannot listen on 127.0.0.1:{port}: Address already in use"
        ]


def test_an_install_dir_others_could_swap_is_refused(sprite: Sprite) -> None:
    shared = sprite.root / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    one_line_error(
        sprite.setup("--install-dir", str(shared / "opt")),
        f"sprite.install-dir {shared / 'opt'}: {shared} (uid 0, mode 0777) lets an account other than "
        "root replace the code root runs",
    )
    assert sorted(p.name for p in sprite.root.iterdir()) == ["shared"], "nothing made"
    assert tree(shared) == {}


def lasting_accounts() -> set[str]:
    """The machine's account names but the throwaway ones other tests beside this one make."""
    names = (line.split(":", 1)[0] for line in Path("/etc/passwd").read_text().splitlines() if line)
    return {name for name in names if not fleet_harness.THROWAWAY_NAME.fullmatch(name)}


def test_install_only_installs(tmp_path: Path) -> None:
    """`zodex sprite install` (docs/deploy.md's first step): the installation every account
    can run, and no account, config, key or unit."""
    if os.geteuid() != 0:
        pytest.skip("zodex sprite install needs root")
    base = Path(tempfile.mkdtemp(prefix="zodex-install-", dir="/tmp"))
    base.chmod(0o755)
    target = base / "opt" / "zodex"
    users_before = lasting_accounts()
    try:
        zodex = [sys.executable, "-c", ZODEX_MAIN]
        done = subprocess.run([*zodex, "sprite", "install", "--install-dir", str(target)],
                              capture_output=True, text=True, timeout=170, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert (
            f"Zodex installed in {target} with " in done.stdout and "every account can run it" in done.stdout
        )
        assert f"from now on use {target / 'bin' / 'zodex'} " in done.stdout
        ran = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", str(target / "bin" / "zodex"), "--version"],
            capture_output=True, text=True, timeout=60, check=False, env=CLEAN_ENV, cwd="/",
        )  # fmt: skip
        assert ran.returncode == 0 and "version" in ran.stdout, ran.stderr
        assert sorted(p.name for p in base.iterdir()) == ["opt"] and sorted(
            p.name for p in target.parent.iterdir()
        ) == ["zodex"]
        assert lasting_accounts() == users_before, "no account made"
        refused = subprocess.run([*zodex, "sprite", "install", "--install-dir", "relative/dir"],
                                 capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        one_line_error(refused, "--install-dir must be an absolute path, got 'relative/dir'")
    finally:
        shutil.rmtree(base, ignore_errors=True)
