"""`zodex sprite setup` as root, for real: accounts, group, workspace, config, state, key,
the agent's worker code and the unit, with the owners and modes of
docs/sprite.md#files-and-modes; run twice it keeps the key and repairs; bad input changes
nothing."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.sprite.operator.conftest import Sprite

URL_SAFE_KEY = re.compile(r"[A-Za-z0-9_-]{43,}")


def owner_mode(path: Path) -> tuple[str, str, int]:
    info = path.lstat()
    return pwd.getpwuid(info.st_uid).pw_name, grp.getgrgid(info.st_gid).gr_name, stat.S_IMODE(info.st_mode)


def test_setup_makes_accounts_directories_config_and_key(sprite: Sprite) -> None:
    done = sprite.setup()
    assert done.returncode == 0, done.stderr

    service, agent = pwd.getpwnam(sprite.service), pwd.getpwnam(sprite.agent)
    assert service.pw_shell in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")
    assert service.pw_uid < 1000, "the service account is a system account"
    assert service.pw_gid == grp.getgrnam(sprite.group).gr_gid
    assert (agent.pw_shell, agent.pw_dir) == ("/bin/bash", str(sprite.home))
    agent_groups = subprocess.run(["id", "-Gn", sprite.agent], capture_output=True, text=True, check=True)
    assert agent_groups.stdout.split() == [sprite.agent], "the agent is in its own group only: no sudo"

    assert owner_mode(sprite.workspace) == (sprite.agent, sprite.agent, 0o750)
    assert owner_mode(sprite.config) == ("root", sprite.group, 0o640)
    assert owner_mode(sprite.state) == (sprite.service, sprite.group, 0o700)
    assert owner_mode(sprite.state / "logs") == (sprite.service, sprite.group, 0o700)
    assert owner_mode(sprite.key_file) == (sprite.service, sprite.group, 0o600)
    key = sprite.key_file.read_text().strip()
    assert URL_SAFE_KEY.fullmatch(key), "at least 256 bits, URL-safe"

    config = sprite.config.read_text()
    assert key not in config, "the config holds no secret"
    table = tomllib.loads(config)["sprite"]
    assert (table["agent-user"], table["port"], table["workspace"]) == (
        sprite.agent,
        18080,
        str(sprite.workspace),
    )

    url = f"http://sprite.test:18080/mcp?key={key}"
    assert done.stdout.count(url) == 1, done.stdout
    assert done.stderr == ""

    # The code the agent runs: root's, read-only to the agent, importable by it.
    python = sprite.install / "bin" / "python3"
    assert owner_mode(sprite.install)[:2] == ("root", "root")
    imported = sprite.as_agent(str(python), "-I", "-c", "import zodex_worker.main, zmq; print('ok')")
    assert imported.stdout.strip() == "ok", imported.stderr
    touch = sprite.as_agent("touch", str(sprite.install / "lib" / "planted"))
    assert touch.returncode != 0, "the agent cannot change the worker's code"

    unit = sprite.config.parent / f"zodex-sprite-{sprite.service}.service"
    assert f"sprite serve --config {sprite.config}" in unit.read_text()
    assert owner_mode(unit) == ("root", "root", 0o644)


def test_setup_twice_keeps_key_and_accounts_and_repairs_modes(ready_sprite: Sprite) -> None:
    sprite = ready_sprite
    key = sprite.key_file.read_text()
    uids = (pwd.getpwnam(sprite.agent).pw_uid, pwd.getpwnam(sprite.service).pw_uid)
    sprite.key_file.chmod(0o644)
    sprite.workspace.chmod(0o777)
    (sprite.state / "logs").chmod(0o755)
    os.chown(sprite.config, 0, 0)

    again = sprite.run("setup")  # no flags: everything comes from the config file
    assert again.returncode == 0, again.stderr

    assert sprite.key_file.read_text() == key
    assert (pwd.getpwnam(sprite.agent).pw_uid, pwd.getpwnam(sprite.service).pw_uid) == uids
    assert owner_mode(sprite.key_file) == (sprite.service, sprite.group, 0o600)
    assert owner_mode(sprite.workspace) == (sprite.agent, sprite.agent, 0o750)
    assert owner_mode(sprite.state / "logs") == (sprite.service, sprite.group, 0o700)
    assert owner_mode(sprite.config) == ("root", sprite.group, 0o640)
    assert f"repaired {sprite.key_file}: mode 0644 → 0600" in again.stdout
    assert "rotate-key" in again.stdout, "a key that was exposed is worth rotating"
    assert f"repaired {sprite.workspace}: mode 0777 → 0750" in again.stdout
    assert again.stdout.count(f"/mcp?key={key.strip()}") == 1


def test_setup_again_records_a_changed_flag(ready_sprite: Sprite) -> None:
    again = ready_sprite.run("setup", "--port", "18181")
    assert again.returncode == 0, again.stderr
    table = tomllib.loads(ready_sprite.config.read_text())["sprite"]
    assert (table["port"], table["agent-user"]) == (18181, ready_sprite.agent)


def tree(root: Path) -> dict[str, tuple[int, int, int, bytes | None]]:
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        found[str(path)] = (info.st_uid, info.st_gid, info.st_mode, content)
    return found


BAD_INPUTS = [
    (["--workspace", "relative/ws"], "sprite.workspace must be an absolute path, got 'relative/ws'"),
    (["--port", "0"], "sprite.port: 0 is below the minimum 1"),
    (["--port", "70000"], "sprite.port: 70000 is above the maximum 65535"),
    (
        ["--port", "http"],
        "sprite.port: expected a whole number written as plain digits (e.g. 16000), got 'http'",
    ),
    (["--tls-cert", "/etc/hostname"], "sprite.tls-cert and sprite.tls-key go together: set both or neither"),
    (["--agent-user", "Not Valid"], "sprite.agent-user 'Not Valid' is not a valid account name"),
    (["--agent-user", "root"], "sprite.agent-user cannot be root"),
    (["--address", "example.com"], "sprite.address must be an IP address"),
    (["--public-url", "ftp://x"], "sprite.public-url must be an http:// or https:// URL with a host"),
    (["--public-url", "https://x/?key=1"], "sprite.public-url must not carry a query"),
    (["--state-dir", "/"], "sprite.state-dir cannot be /"),
    (["--agent-home", "home"], "--agent-home must be an absolute path, got 'home'"),
]


def one_line_error(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("flags", "expected"), BAD_INPUTS, ids=[" ".join(f) for f, _ in BAD_INPUTS])
def test_bad_input_on_a_fresh_host_changes_nothing(sprite: Sprite, flags: list[str], expected: str) -> None:
    one_line_error(sprite.setup(*flags), expected)
    assert list(sprite.root.iterdir()) == []
    for name in (sprite.agent, sprite.service):
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
    with pytest.raises(KeyError):
        grp.getgrnam(sprite.group)


def test_service_and_agent_must_differ(sprite: Sprite) -> None:
    one_line_error(
        sprite.setup("--service-user", sprite.agent),
        "sprite.service-user and sprite.agent-user must be different accounts",
    )
    assert list(sprite.root.iterdir()) == []


def test_tls_files_must_exist(sprite: Sprite) -> None:
    missing = str(sprite.root / "missing.pem")
    one_line_error(
        sprite.setup("--tls-cert", missing, "--tls-key", missing), f"--tls-cert: no such file: {missing}"
    )
    assert list(sprite.root.iterdir()) == []


@pytest.mark.parametrize(("flags", "expected"), BAD_INPUTS[:6], ids=[" ".join(f) for f, _ in BAD_INPUTS[:6]])
def test_bad_input_on_a_set_up_host_changes_nothing(
    ready_sprite: Sprite, flags: list[str], expected: str
) -> None:
    before = tree(ready_sprite.root)
    one_line_error(ready_sprite.run("setup", *flags), expected)
    assert tree(ready_sprite.root) == before


def test_an_agent_in_the_config_group_is_refused(ready_sprite: Sprite) -> None:
    sprite = ready_sprite
    subprocess.run(["usermod", "--append", "--groups", sprite.group, sprite.agent], check=True)
    before = tree(sprite.root)
    one_line_error(sprite.run("setup"), f"agent account {sprite.agent} is in group {sprite.group}")
    assert tree(sprite.root) == before


def test_the_agent_cannot_read_the_config_or_the_key(ready_sprite: Sprite) -> None:
    sprite = ready_sprite
    for path in (sprite.config, sprite.key_file, sprite.state / "logs"):
        denied = sprite.as_agent("cat", str(path))
        assert denied.returncode != 0 and denied.stdout == "", path
    listing = sprite.as_agent("ls", str(sprite.state))
    assert listing.returncode != 0 and "Permission denied" in listing.stderr
    # …while the service account can read both (the check is not vacuous).
    for path in (sprite.config, sprite.key_file):
        allowed = subprocess.run(
            ["runuser", "-u", sprite.service, "--", "cat", str(path)], capture_output=True, text=True, cwd="/"
        )
        assert allowed.returncode == 0 and allowed.stdout, allowed.stderr


def test_the_unit_passes_systemd_analyze_verify(ready_sprite: Sprite) -> None:
    analyzer = shutil.which("systemd-analyze")
    if analyzer is None:
        pytest.skip("systemd-analyze is missing (scripts/setup.sh --test installs it)")
    unit = ready_sprite.config.parent / f"zodex-sprite-{ready_sprite.service}.service"
    good = subprocess.run([analyzer, "verify", str(unit)], capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stderr
    assert good.stderr == "", good.stderr
    # The analyzer does reject a broken unit: the check above can fail.
    broken = unit.with_name("zodex-sprite-broken.service")
    broken.write_text(unit.read_text().replace("ExecStart=/", "ExecStart=relative/"))
    bad = subprocess.run([analyzer, "verify", str(broken)], capture_output=True, text=True, check=False)
    assert bad.returncode != 0
