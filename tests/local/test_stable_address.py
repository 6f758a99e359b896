"""A stable address (docs/modes.md#a-stable-address): the port a restarted runtime takes,
`mcp.port`, and `mcp.token = persistent` with `zodex local setup --rotate-token`."""

from __future__ import annotations

import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.local import ZODEX, LocalEnv, local_env

pytestmark = pytest.mark.timeout(90)


def port_of(local: LocalEnv) -> int:
    url: str = local.discovery()["mcp"]["url"]
    port = urlsplit(url).port
    assert port is not None
    return port


def token_of(local: LocalEnv) -> str:
    return Path(local.discovery()["mcp"]["token_path"]).read_text().strip()


@contextmanager
def listening() -> Iterator[int]:
    """A loopback port someone else listens on, for as long as the block runs."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def free_port() -> int:
    with listening() as port:
        return port


def test_a_restart_reuses_the_port_and_keeps_the_token(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        port, token = port_of(local), token_of(local)
        local.run("local", "stop")
        local.run("local", "start", str(tmp_path))
        assert port_of(local) == port
        assert token_of(local) == token, "mcp.token is persistent by default"


def test_a_per_start_token_is_new_at_every_start(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        kept = token_of(local)
        local.run("local", "stop")
        local.run("local", "config", "set", "mcp.token", "per-start")
        local.run("local", "start", str(tmp_path))
        first = token_of(local)
        local.run("local", "stop")
        local.run("local", "start", str(tmp_path))
        assert len({kept, first, token_of(local)}) == 3, "per-start: a new token at every start"


def test_a_remembered_port_taken_meanwhile_gives_way_to_a_free_one(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        port = port_of(local)
        local.run("local", "stop")
        with listening_on(port):
            local.run("local", "start", str(tmp_path))
            assert port_of(local) != port
        local.run("local", "stop")
        local.run("local", "start", str(tmp_path))
        assert port_of(local) != port, "the port taken instead is the one remembered now"


@contextmanager
def listening_on(port: int) -> Iterator[None]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(1)
        yield
    finally:
        sock.close()


def test_a_pinned_port_is_taken_and_a_busy_one_refused(tmp_path: Path) -> None:
    with local_env() as local:
        pinned = free_port()
        local.run("local", "config", "set", "mcp.port", str(pinned))
        assert local.run("local", "config", "get", "mcp.port").stdout == f"{pinned}\n"
        local.run("local", "start", str(tmp_path))
        assert port_of(local) == pinned
        local.run("local", "stop")
        with listening() as busy:
            local.run("local", "config", "set", "mcp.port", str(busy))
            refused = local.run("local", "start", str(tmp_path), check=False)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr == (
            f"error: mcp.port {busy} is not free (Address already in use); free it, or run "
            f"`{ZODEX} local config unset mcp.port` to use any free port\n"
        )
        assert not local.discovery_file.exists() and local.status()["running"] is False


@pytest.mark.parametrize("value", ["0", "65536", "http", "1.5"])
def test_a_bad_port_is_refused(value: str) -> None:
    with local_env() as local:
        refused = local.run("local", "config", "set", "mcp.port", value, check=False)
        assert refused.returncode == 2 and refused.stderr.startswith("error: mcp.port: "), refused.stderr
        assert local.run("local", "config", "get", "mcp.port").stdout == "\n", "unset still"


def test_a_persistent_token_survives_restarts_until_rotated(tmp_path: Path) -> None:
    with local_env() as local:
        bad = local.run("local", "config", "set", "mcp.token", "forever", check=False)
        assert bad.returncode == 2
        assert bad.stderr == "error: mcp.token: expected per-start or persistent, got 'forever'\n"
        assert local.run("local", "config", "get", "mcp.token").stdout == "persistent\n"
        local.run("local", "start", str(tmp_path))
        token = token_of(local)
        token_file = Path(local.discovery()["mcp"]["token_path"])
        refused = local.run("local", "setup", "--rotate-token", check=False)
        assert refused.returncode == 2 and "before replacing its MCP token" in refused.stderr
        assert f"stop it with `{ZODEX} local stop`" in refused.stderr
        assert token_of(local) == token, "a refusal changes nothing"
        local.run("local", "stop")
        local.run("local", "start", str(tmp_path))
        assert token_of(local) == token
        local.run("local", "stop")

        rotated = local.run("local", "setup", "--rotate-token")
        assert f"MCP token replaced: {token_file}" in rotated.stdout
        new = token_file.read_text().strip()
        assert new != token and len(new) == 64
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        local.run("local", "start", str(tmp_path))
        assert token_of(local) == new


def test_a_persistent_token_open_to_others_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A kept token is trusted at every start, so it is read only as a secret file of the
    user's own, like the session key (docs/security.md#secrets)."""
    with local_env() as local:
        local.run("local", "start", str(tmp_path))
        token_file = Path(local.discovery()["mcp"]["token_path"])
        local.run("local", "stop")
        content = token_file.read_bytes()
        token_file.chmod(0o644)
        done = local.run("local", "start", str(tmp_path), check=False)
        assert done.returncode == 1, done.stdout
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("error: Zodex Local failed to start: "), line
        assert (
            f" ERROR {token_file} is open to group or others (mode 0644): Zodex will not use it as a "
            "secret, which others may have read; remove it (see `"
        ) in line, line
        assert token_file.read_bytes() == content and stat.S_IMODE(token_file.stat().st_mode) == 0o644
        assert not local.discovery_file.exists()

        token_file.unlink()
        token_file.symlink_to(tmp_path / "elsewhere")
        [line] = local.run("local", "start", str(tmp_path), check=False).stderr.strip().splitlines()
        assert f"{token_file} cannot be opened as a secret file (Too many levels of symbolic links)" in line
        token_file.unlink()
        local.run("local", "start", str(tmp_path))  # a new one is made
        assert len(token_of(local)) == 64 and stat.S_IMODE(token_file.stat().st_mode) == 0o600
