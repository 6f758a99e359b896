"""Sprite's config file (docs/sprite.md#config): defaults, every key, one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from zodex_gateway.config.settings import KEYS
from zodex_gateway.sprite.settings import (
    SHARED_KEYS,
    SPRITE_KEYS,
    ConfigError,
    default_config_path,
    load_settings,
)
from zodex_protocol.limits import Limits


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_an_empty_file_gives_every_default(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, ""))
    assert (settings.address, settings.port, settings.tls_cert, settings.tls_key) == (
        "0.0.0.0",
        8080,
        None,
        None,
    )
    assert (settings.service_user, settings.agent_user, settings.group) == ("zodex", "zodex-agent", "zodex")
    assert settings.workspace == Path("/workspace")
    assert settings.state_dir == Path("/var/lib/zodex")
    assert settings.runtime_dir == Path("/run/zodex")
    assert settings.install_dir == Path("/opt/zodex")
    assert settings.allowed_hosts == () and settings.public_url is None
    assert settings.limits == Limits()
    assert (settings.max_body, settings.header_timeout_ms, settings.max_pending_connections) == (
        64 << 20,
        5000,
        256,
    )
    assert settings.cgroups is True
    assert settings.key_file == Path("/var/lib/zodex/key")
    assert settings.log_file == Path("/var/lib/zodex/logs/sprite.log")
    assert settings.status_file == Path("/var/lib/zodex/status.json")
    assert settings.local_url() == "http://127.0.0.1:8080"


def test_every_key_is_read(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path,
            """
[sprite]
address = "127.0.0.1"
port = 9443
tls-cert = "/etc/ssl/a.pem"
tls-key = "/etc/ssl/a.key"
allowed-hosts = "Sprite.Example.com, 10.0.0.1:9443"
public-url = "https://sprite.example.com/"
service-user = "svc"
agent-user = "agent"
group = "grp"
workspace = "/srv/ws/"
state-dir = "/srv/state"
runtime-dir = "/run/z"
install-dir = "/opt/z"
[session]
timeout = "1h"
cgroups = "off"
[mcp]
max-body = "1mb"
[http]
header-timeout = "2s"
""",
        )
    )
    assert (settings.address, settings.port) == ("127.0.0.1", 9443)
    assert (settings.tls_cert, settings.tls_key) == (Path("/etc/ssl/a.pem"), Path("/etc/ssl/a.key"))
    assert settings.allowed_hosts == ("sprite.example.com", "10.0.0.1:9443")
    assert settings.connector_url("k-_1") == "https://sprite.example.com/mcp?key=k-_1"
    assert settings.local_url() == "https://127.0.0.1:9443"
    assert (settings.service_user, settings.agent_user, settings.group) == ("svc", "agent", "grp")
    assert settings.workspace == Path("/srv/ws")
    assert (settings.state_dir, settings.runtime_dir, settings.install_dir) == (
        Path("/srv/state"),
        Path("/run/z"),
        Path("/opt/z"),
    )
    assert settings.limits.timeout_ms == 3_600_000 and settings.cgroups is False
    assert (settings.max_body, settings.header_timeout_ms) == (1 << 20, 2000)
    assert settings.listener_limits().header_timeout_s == 2.0


def test_the_default_public_url_names_this_host_and_port(tmp_path: Path) -> None:
    import socket

    settings = load_settings(write(tmp_path, "[sprite]\nport = 8443\n"))
    assert settings.connector_url("abc") == f"http://{socket.gethostname()}:8443/mcp?key=abc"


def test_the_config_path_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZODEX_SPRITE_CONFIG", raising=False)
    assert default_config_path() == Path("/etc/zodex/config.toml")
    monkeypatch.setenv("ZODEX_SPRITE_CONFIG", "/tmp/x/config.toml")
    assert default_config_path() == Path("/tmp/x/config.toml")


def test_only_locals_limit_keys_are_shared() -> None:
    assert (
        "session.timeout" in SHARED_KEYS
        and "mcp.max-body" in SHARED_KEYS
        and "session.cgroups" in SHARED_KEYS
    )
    assert not {"history.max-age", "tunnel.command", "context.workdir-hint", "mcp.read-only-hint"} & set(
        SHARED_KEYS
    )
    assert set(SHARED_KEYS) <= set(KEYS)
    assert not set(SPRITE_KEYS) & set(KEYS)


REFUSED = [
    ("[sprite]\nport = 0\n", "sprite.port: 0 is below the minimum 1"),
    ("[sprite]\nport = 65536\n", "sprite.port: 65536 is above the maximum 65535"),
    ("[sprite]\nport = true\n", "sprite.port: expected a whole number, got True"),
    ('[sprite]\nport = "http"\n', "sprite.port: expected a whole number written as plain digits"),
    ('[sprite]\nworkspace = "ws"\n', "sprite.workspace must be an absolute path, got 'ws'"),
    ('[sprite]\nstate-dir = "/a/../b"\n', "sprite.state-dir must not contain '..'"),
    ('[sprite]\ninstall-dir = ""\n', "sprite.install-dir: empty value; remove the line to use the default"),
    ('[sprite]\ntls-key = "/k"\n', "sprite.tls-cert and sprite.tls-key go together: set both or neither"),
    ('[sprite]\nagent-user = "Agent"\n', "sprite.agent-user 'Agent' is not a valid account name"),
    ('[sprite]\nservice-user = "root"\n', "sprite.service-user cannot be root"),
    (
        '[sprite]\nagent-user = "zodex"\n',
        "sprite.service-user and sprite.agent-user must be different accounts",
    ),
    ('[sprite]\ngroup = "zodex-agent"\n', "sprite.group must not be the agent's own group"),
    ('[sprite]\naddress = "localhost"\n', "sprite.address must be an IP address"),
    ('[sprite]\nallowed-hosts = "a b"\n', "sprite.allowed-hosts: 'a b' is not host or host:port"),
    ('[sprite]\npublic-url = "sprite.example.com"\n', "sprite.public-url must be an http:// or https:// URL"),
    ('[sprite]\npublic-url = "https://h:99999"\n', "sprite.public-url has a bad port"),
    ("[sprite]\nprot = 1\n", "unknown key 'sprite.prot'; did you mean sprite.port"),
    ('[history]\nmax-age = "1d"\n', "history.max-age is a Local key that Sprite does not use; remove it"),
    ('[session]\ntimeout = "2"\n', "session.timeout: '2' has no unit"),
    ("port = 1\n", "unknown key 'port'"),
    ("[sprite\n", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "expected"), REFUSED, ids=[e for _, e in REFUSED])
def test_a_bad_file_is_refused_in_one_line_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message


def test_a_missing_file_says_to_run_setup(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file; run `zodex sprite setup` first"):
        load_settings(tmp_path / "none.toml")
