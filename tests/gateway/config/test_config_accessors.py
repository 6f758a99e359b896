"""Code reads Local's configuration by kind: ``duration_ms``, ``size_bytes``, ``integer``,
``flag`` and ``text`` return the effective value typed, and asking for a key by the wrong
kind is refused (a bug in the caller), naming the key and its kind."""

from __future__ import annotations

import pytest

from zodex_gateway.config.settings import KEYS, LocalConfig
from zodex_gateway.context import ContextSwitches
from zodex_gateway.web.listener_limits import ListenerLimits

MIB = 1024 * 1024


def test_each_kind_reads_its_effective_value() -> None:
    config = LocalConfig()
    assert config.duration_ms("history.max-age") == KEYS["history.max-age"].default
    assert config.size_bytes("history.max-size") == 500 * MIB
    assert config.integer("session.max-per-worker") == 64
    assert config.flag("session.cgroups") is True and config.flag("mcp.read-only-hint") is True
    assert config.text("tunnel.command") is None
    config.set("history.max-age", "2d")
    config.set("history.max-size", "16mb")
    config.set("session.max-per-worker", "9")
    config.set("context.global-skills", "off")
    config.set("mcp.read-only-hint", "false")
    config.set("tunnel.command", "cloudflared tunnel run")
    assert config.duration_ms("history.max-age") == 2 * 86_400_000
    assert config.size_bytes("history.max-size") == 16 * MIB
    assert config.integer("session.max-per-worker") == 9
    assert config.flag("context.global-skills") is False and config.flag("mcp.read-only-hint") is False
    assert config.text("tunnel.command") == "cloudflared tunnel run"


@pytest.mark.parametrize(
    ("read", "key", "kind"),
    [
        ("duration_ms", "history.max-size", "size"),
        ("size_bytes", "session.timeout", "duration"),
        ("integer", "session.cgroups", "switch"),
        ("flag", "tunnel.id", "string"),
        ("text", "session.max-per-worker", "int"),
    ],
)
def test_a_read_of_the_wrong_kind_is_refused(read: str, key: str, kind: str) -> None:
    with pytest.raises(TypeError, match=rf"^{key} is a {kind} key, not "):
        getattr(LocalConfig(), read)(key)


def test_consumers_take_the_typed_reads() -> None:
    config = LocalConfig()
    config.set("http.header-timeout", "1500ms")
    config.set("http.max-pending-connections", "12")
    config.set("mcp.max-body", "1mb")
    config.set("context.workdir-hint", "off")
    assert ListenerLimits.from_config(config) == ListenerLimits(
        header_timeout_s=1.5, max_pending=12, max_body=MIB
    )
    assert ContextSwitches.from_config(config.flag) == ContextSwitches(workdir_hint=False)
