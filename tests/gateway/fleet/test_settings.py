"""host.toml and gateway.toml: defaults, and each refusal as one line naming the key
(docs/fleet.md#config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from zodex_gateway.cli import cli
from zodex_gateway.config.units import ConfigError
from zodex_gateway.fleet.settings import parse_gateway_document, parse_host_document

CONFIG = Path("/etc/zodex/test.toml")


def _host(**table: Any) -> dict[str, Any]:
    return {"host": {"name": "alpha", **table}}


def test_host_defaults_come_from_sprite_and_the_state_dir() -> None:
    settings = parse_host_document({**_host(), "sprite": {"state-dir": "/srv/z"}}, CONFIG)
    assert settings.endpoint == "tcp://0.0.0.0:7700"
    assert settings.secret_key == Path("/srv/z/host.key")
    assert settings.signing_key == Path("/srv/z/signing.key")
    assert settings.gateway_keys == Path("/srv/z/gateways")
    assert settings.sprite.agent_user == "zodex-agent"
    assert settings.incarnations_file == Path("/srv/z/host-incarnations")
    ipv6 = parse_host_document(_host(endpoint="tcp://[::1]:9000"), CONFIG)
    assert ipv6.endpoint == "tcp://[::1]:9000"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "host.name is required"),
        ({"host": {}}, "host.name is required"),
        (_host(name="Alpha"), "host.name must be 1-32 of a-z 0-9 -"),
        (_host(name="a-"), "host.name must be 1-32 of a-z 0-9 -"),
        (_host(endpoint="ipc:///x"), "host.endpoint must be tcp://<address>:<port>"),
        (_host(endpoint="tcp://example.com:7700"), "host.endpoint: 'example.com' is not an IP address"),
        (_host(endpoint="tcp://10.0.0.1:0"), "host.endpoint: the port must be a number from 1 to 65535"),
        (_host(endpoint="tcp://10.0.0.1"), "host.endpoint must be tcp://<address>:<port>"),
        (_host(**{"secret-key": "relative/key"}), "host.secret-key must be an absolute path"),
        (_host(**{"gateway-keys": "/a/../b"}), "host.gateway-keys must not contain '..'"),
        (_host(endpint="tcp://1.2.3.4:1"), "unknown key 'host.endpint'; did you mean host.endpoint?"),
        ({**_host(), "sprite": {"port": 8080}}, "sprite.port is a Sprite HTTP key that a host does not use"),
        ({**_host(), "http": {"header-timeout": "5s"}}, "http.header-timeout is a Sprite HTTP key"),
        ({**_host(), "sprite": {"agent-user": "root"}}, "cannot be root"),
    ],
)
def test_host_refusals(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_host_document(document, CONFIG)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def _entry(**changes: Any) -> dict[str, Any]:
    entry = {
        "name": "alpha",
        "endpoint": "tcp://alpha.zodex.svc:7700",
        "public-key": "/k/alpha.pub",
        "signing-key": "/k/alpha.signing",
        "mcp-key": "/k/alpha.mcp",
    }
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


def _gateway(*entries: dict[str, Any], **table: Any) -> dict[str, Any]:
    return {"gateway": {"secret-key": "/k/gw.key", **table}, "hosts": list(entries)}


def test_gateway_defaults_and_hosts() -> None:
    settings = parse_gateway_document(_gateway(_entry(), _entry(name="beta", workspace="/workspace")), CONFIG)
    assert (settings.address, settings.port) == ("0.0.0.0", 8080)
    assert [h.name for h in settings.hosts] == ["alpha", "beta"]
    assert settings.hosts[0].endpoint == "tcp://alpha.zodex.svc:7700"  # gateways may name hosts by DNS
    assert (settings.hosts[0].workspace, settings.hosts[1].workspace) == (None, "/workspace")
    assert settings.max_body > 0 and settings.header_timeout_ms > 0


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"gateway": {"secret-key": "/k"}}, "at least one [[hosts]] table is required"),
        ({"gateway": {"secret-key": "/k"}, "hosts": 5}, "hosts must be [[hosts]] tables, one per host"),
        (_gateway(_entry(), _entry()), "hosts: the name 'alpha' is given twice"),
        ({"hosts": [_entry()]}, "gateway.secret-key is required"),
        (_gateway(_entry(**{"mcp-key": None})), "hosts[0].mcp-key is required"),
        (
            _gateway(_entry(endpoint="tcp://a b:1")),
            "hosts[0].endpoint: 'a b' is not an IP address or a DNS name",
        ),
        (_gateway(_entry(name="-x")), "hosts[0].name must be 1-32 of a-z 0-9 -"),
        (_gateway(_entry(extra="1")), "unknown key 'hosts[0].extra'"),
        (_gateway(_entry(), port=70000), "gateway.port: 70000 is above the maximum 65535"),
        (_gateway(_entry(), address="localhost"), "gateway.address must be an IP address"),
        (_gateway(_entry(), prt=1), "unknown key 'gateway.prt'; did you mean gateway.port"),
        ({**_gateway(_entry()), "history": {"max-size": "1MiB"}}, "unknown key 'history.max-size'"),
    ],
)
def test_gateway_refusals(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_gateway_document(document, CONFIG)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_serve_commands_refuse_a_missing_or_bad_config_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = tmp_path / "nope.toml"
    done = runner.invoke(cli, ["gateway", "serve", "--config", str(missing)])
    assert done.exit_code == 1
    assert (
        done.output
        == f"zodex gateway serve: {missing}: no such config file; write gateway.toml (docs/fleet.md#gatewaytoml)\n"
    )
    bad = tmp_path / "host.toml"
    bad.write_text('[host]\nname = "x"\n[sprite]\nport = 1\n')
    done = runner.invoke(cli, ["host", "serve", "--config", str(bad)])
    assert done.exit_code == 1
    assert done.output.startswith(f"zodex host serve: {bad}: sprite.port is a Sprite HTTP key")
    for command in ("host", "gateway"):
        done = runner.invoke(cli, [command, "serve", "--config", str(tmp_path)])
        assert done.exit_code == 1
        assert done.output.startswith(f"zodex {command} serve: {tmp_path}: cannot read: ")
        assert done.output.count("\n") == 1, done.output


def test_the_cap_on_pending_connections_and_log_rotation_are_read() -> None:
    settings = parse_host_document(
        {**_host(**{"max-pending-connections": 16}), "log": {"max-size": "1mb", "keep": "5"}}, CONFIG
    )
    assert settings.max_pending_connections == 16
    assert (settings.sprite.log_max_bytes, settings.sprite.log_keep) == (1024 * 1024, 5)
    assert parse_host_document(_host(), CONFIG).max_pending_connections == 256
    assert (
        parse_host_document(_host(**{"max-pending-connections": "16"}), CONFIG).max_pending_connections == 16
    )
    for bad, says in (
        (0, "0 is below the minimum 1"),
        (65537, "65537 is above the maximum 65536"),
        (True, "expected a whole number, got True"),
        ("16k", "expected a whole number written as plain digits"),
    ):
        with pytest.raises(ConfigError, match=rf"^host\.max-pending-connections: {says}"):
            parse_host_document(_host(**{"max-pending-connections": bad}), CONFIG)
    with pytest.raises(ConfigError, match=r"log\.max-size"):
        parse_host_document({**_host(), "log": {"max-size": "1kb"}}, CONFIG)
