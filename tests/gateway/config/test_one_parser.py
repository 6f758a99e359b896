"""Local's local.toml, Sprite's config.toml, a fleet host's host.toml and a gateway's
gateway.toml go through one parser (docs/config.md#one-parser-for-every-file): a key they
share is refused in the same words in each, and so are a bad port, a bad path, a text value
that is not one line, a value where a table belongs and an unknown key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zodex_gateway.config.settings import LocalConfig
from zodex_gateway.config.units import ConfigError
from zodex_gateway.fleet.settings import parse_gateway_document, parse_host_document
from zodex_gateway.sprite.settings import parse_document

CONFIG = Path("/etc/zodex/test.toml")
ENTRY = {
    "name": "alpha",
    "endpoint": "tcp://10.0.0.1:7700",
    "public-key": "/k/alpha.pub",
    "signing-key": "/k/alpha.signing",
    "mcp-key": "/k/alpha.mcp",
}


def local(document: dict[str, Any]) -> object:
    return LocalConfig.from_document(document)


def sprite(document: dict[str, Any]) -> object:
    return parse_document(document, CONFIG)


def host(document: dict[str, Any]) -> object:
    return parse_host_document({"host": {"name": "alpha", **document.pop("host", {})}, **document}, CONFIG)


def gateway(document: dict[str, Any]) -> object:
    own = {"secret-key": "/k/gw.key", **document.pop("gateway", {})}
    return parse_gateway_document({"gateway": own, "hosts": [ENTRY], **document}, CONFIG)


Parse = Callable[[dict[str, Any]], object]


def refusal(parse: Parse, document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as refused:
        parse(document)
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"session": {"timeout": "2"}}, "session.timeout: '2' has no unit; always give one: "),
        ({"session": {"timeout": "0s"}}, "session.timeout: 0ms is below the minimum 1ms"),
        ({"log": {"keep": 101}}, "log.keep: 101 is above the maximum 100"),
        (
            {"output": {"preview": 20000}},
            "output.preview (20000) must not exceed output.inline-limit (16000)",
        ),
        (
            {"session": {"cgroups": "maybe"}},
            "session.cgroups: expected on/off (also true/false, yes/no), got 'maybe'",
        ),
    ],
)
@pytest.mark.parametrize("parse", [local, sprite, host])
def test_a_shared_key_is_refused_alike_in_every_file(
    parse: Parse, document: dict[str, Any], message: str
) -> None:
    assert refusal(parse, document).startswith(message)


@pytest.mark.parametrize(
    ("parse", "document", "key"),
    [
        (local, {"mcp": {"port": 70000}}, "mcp.port"),
        (sprite, {"sprite": {"port": 70000}}, "sprite.port"),
        (gateway, {"gateway": {"port": 70000}}, "gateway.port"),
    ],
)
def test_every_port_is_a_whole_number_key(parse: Parse, document: dict[str, Any], key: str) -> None:
    assert refusal(parse, document) == f"{key}: 70000 is above the maximum 65535"


def test_a_whole_number_may_be_written_as_digits_in_every_file() -> None:
    assert parse_gateway_document({**_gateway_with(port="9000")}, CONFIG).port == 9000
    settings = parse_host_document({"host": {"name": "alpha", "max-pending-connections": "16"}}, CONFIG)
    assert settings.max_pending_connections == 16


def _gateway_with(**own: object) -> dict[str, Any]:
    return {"gateway": {"secret-key": "/k/gw.key", **own}, "hosts": [ENTRY]}


@pytest.mark.parametrize(
    ("parse", "document", "message"),
    [
        (sprite, {"sprite": {"workspace": "/"}}, "sprite.workspace cannot be /"),
        (host, {"host": {"secret-key": "/"}}, "host.secret-key cannot be /"),
        (gateway, {"gateway": {"secret-key": "/k/a\nb"}}, "gateway.secret-key: must be a single line"),
        (sprite, {"sprite": {"agent-user": "a\u2028b"}}, "sprite.agent-user: must be a single line"),
        (sprite, {"sprite": {"public-url": " "}}, "sprite.public-url: empty value; remove the line to use"),
        (host, {"host": {"endpoint": ""}}, "host.endpoint: empty value; remove the line to use the default"),
    ],
)
def test_a_text_value_is_one_line_in_every_file(parse: Parse, document: dict[str, Any], message: str) -> None:
    assert message in refusal(parse, document)


def test_a_path_of_a_hosts_table_is_checked_as_every_path() -> None:
    document = {"gateway": {"secret-key": "/k/gw.key"}, "hosts": [{**ENTRY, "mcp-key": "/"}]}
    assert refusal(lambda d: parse_gateway_document(d, CONFIG), document) == "hosts[0].mcp-key cannot be /"
    document["hosts"] = [{**ENTRY, "mcp-key": "/k//a.mcp/"}]
    assert parse_gateway_document(document, CONFIG).hosts[0].mcp_key == Path("/k/a.mcp")


@pytest.mark.parametrize(
    ("parse", "document", "message"),
    [
        (local, {"session": 5}, "session must be a table ([session])"),
        (sprite, {"sprite": "x"}, "sprite must be a table ([sprite])"),
        (gateway, {"http": 1}, "http must be a table ([http])"),
        (lambda d: parse_host_document(d, CONFIG), {"host": 5}, "host must be a table ([host])"),
    ],
)
def test_a_value_where_a_table_belongs_says_so(parse: Parse, document: dict[str, Any], message: str) -> None:
    assert refusal(parse, document) == message


@pytest.mark.parametrize(
    ("parse", "document", "message"),
    [
        (local, {"timeout": "1h"}, "unknown key 'timeout'; did you mean session.timeout?"),
        (sprite, {"port": 1}, "unknown key 'port'; did you mean sprite.port?"),
        (host, {"host": {"nme": "x"}}, "unknown key 'host.nme'; did you mean host.name?"),
        (sprite, {"zzz": {"qqqq": 1}}, "unknown key 'zzz.qqqq'; docs/sprite.md#config lists every key"),
        (host, {"zzz": {"qqqq": 1}}, "unknown key 'zzz.qqqq'; docs/fleet.md#hosttoml lists every key"),
        (
            gateway,
            {"zzz": {"qqqq": 1}},
            "unknown key 'zzz.qqqq'; docs/fleet.md#gatewaytoml lists every key",
        ),
        (
            host,
            {"history": {"max-age": "1d"}},
            "history.max-age is a Local key that Sprite does not use; remove it",
        ),
    ],
)
def test_an_unknown_key_names_the_closest_or_the_list(
    parse: Parse, document: dict[str, Any], message: str
) -> None:
    assert refusal(parse, document) == message
