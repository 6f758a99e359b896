"""Local mode's operator configuration: value syntax, keys, validation, the file on disk."""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from zodex_gateway.config.settings import (
    KEYS,
    KINDS,
    ConfigError,
    LocalConfig,
    config_path,
    format_value,
    parse_duration_ms,
    parse_size_bytes,
)
from zodex_protocol.limits import Limits

MIB = 1024 * 1024

# --- value syntax ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250ms", 250),
        ("30s", 30_000),
        ("10min", 600_000),
        ("10m", 600_000),
        ("4h", 14_400_000),
        ("14d", 14 * 86_400_000),
        ("0s", 0),
        ("10MIN", 600_000),
        ("2H", 7_200_000),
        ("  30s  ", 30_000),
        ("30 s", 30_000),
        ("\t5 Ms\n", 5),
        ("007s", 7000),
    ],
)
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10", "no unit"),
        (" 7200 ", "no unit"),
        ("-5s", "negative"),
        ("", "empty"),
        ("   ", "empty"),
        ("1.5h", "smaller unit"),
        ("10x", "unknown unit 'x'"),
        ("10 weeks", "unknown unit"),
        ("s", "not a duration"),
        ("ten seconds", "not a duration"),
        ("1h30min", "not a duration"),
        ("٣s", "not a duration"),  # non-ASCII digits are not digits here
        ("9" * 40 + "d", "too large"),
    ],
)
def test_parse_duration_errors(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as info:
        parse_duration_ms(text)
    assert "\n" not in str(info.value)


def test_duration_error_lists_the_units() -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration_ms("10")
    for unit in ("ms", "s", "min", "h", "d"):
        assert unit in str(info.value)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("123b", 123),
        ("1024kb", MIB),
        ("500mb", 500 * MIB),
        ("16MiB", 16 * MIB),
        ("2gb", 2 * 1024 * MIB),
        ("2GiB", 2 * 1024 * MIB),
        ("1KiB", 1024),
        (" 16 MB ", 16 * MIB),
        ("0b", 0),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("500", "no unit"),
        ("-1mb", "negative"),
        ("", "empty"),
        ("1.5gb", "not a size"),
        ("5tb", "unknown unit"),
        ("mb", "not a size"),
        ("lots", "not a size"),
    ],
)
def test_parse_size_errors(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_size_bytes(text)


@given(ms=st.integers(min_value=0, max_value=10**15))
def test_duration_display_round_trips(ms: int) -> None:
    for key in ("session.timeout", "history.max-age"):
        assert parse_duration_ms(format_value(key, ms)) == ms


@given(size=st.integers(min_value=0, max_value=10**15))
def test_size_display_round_trips(size: int) -> None:
    assert parse_size_bytes(format_value("output.spill-cap", size)) == size


@given(text=st.text(st.characters(exclude_characters=[*map(chr, range(0x20)), "\x7f"]), min_size=1))
def test_the_file_holds_any_string_a_key_accepts(text: str) -> None:
    config = LocalConfig()
    try:
        config.set("tunnel.command", text)
    except ConfigError:
        assume(False)
    assert tomllib.loads(config.to_toml())["tunnel"]["command"] == text


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("session.timeout", 7_200_000, "2h"),
        ("session.timeout", 90 * 60_000, "90min"),
        ("session.poll-settle", 250, "250ms"),
        ("session.drain", 1500, "1500ms"),
        ("history.max-age", 60 * 86_400_000, "60d"),
        ("output.spill-cap", 16 * MIB, "16mb"),
        ("history.max-size", 1536, "1536b"),
        ("history.max-size", 3 * 1024**3, "3gb"),
        ("output.inline-limit", 16_000, "16000"),
        ("context.workdir-hint", True, "on"),
        ("context.workdir-hint", False, "off"),
        ("mcp.read-only-hint", False, "false"),
        ("tunnel.command", "ngrok http 80", "ngrok http 80"),
        ("tunnel.id", None, ""),
    ],
)
def test_format_value(key: str, value: object, shown: str) -> None:
    assert format_value(key, value) == shown


# --- keys and defaults ----------------------------------------------------------------------


def test_every_limit_has_a_key() -> None:
    mapped = {key.limits_field for key in KEYS.values() if key.limits_field}
    assert mapped == {f.name for f in fields(Limits)}


def test_defaults_are_limits() -> None:
    assert LocalConfig().limits() == Limits()


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("session.exec-yield", "10s"),
        ("session.write-yield", "10s"),
        ("session.yield-min", "50ms"),
        ("session.yield-max", "30s"),
        ("session.poll-settle", "250ms"),
        ("session.timeout", "2h"),
        ("session.timeout-min", "1s"),
        ("session.timeout-max", "2h"),
        ("session.kill-grace", "5s"),
        ("session.drain", "200ms"),
        ("session.max-per-worker", "64"),
        ("session.tombstone", "1h"),
        ("output.inline-limit", "16000"),
        ("output.preview", "4000"),
        ("output.spill-cap", "16mb"),
        ("output.spill-max-age", "1d"),
        ("worker.idle-exit", "10min"),
        ("worker.health-interval", "30s"),
        ("history.max-age", "60d"),
        ("history.max-size", "500mb"),
        ("tunnel.id", ""),
        ("tunnel.command", ""),
        ("mcp.read-only-hint", "true"),
        ("context.global-instructions", "on"),
        ("context.global-skills", "on"),
        ("context.workdir-hint", "on"),
        ("context.workdir-skills", "on"),
    ],
)
def test_defaults_match_spec(key: str, shown: str) -> None:
    assert format_value(key, LocalConfig().get(key)) == shown


def test_key_table_is_well_formed() -> None:
    for name, key in KEYS.items():
        assert name == key.name and key.description
        section, _, leaf = name.partition(".")
        assert section and leaf and "." not in leaf
        assert key.kind in KINDS
    assert next(iter(KEYS)) == "session.exec-yield"  # stable, table order


def test_every_default_can_be_set_back_from_its_display() -> None:
    config = LocalConfig()
    for name, shown, is_default in config.items():
        assert is_default
        if shown:
            config.set(name, shown)
    assert config.limits() == Limits()
    assert all(config.get(name) == KEYS[name].default for name in config.values)


# --- set / get / unset ----------------------------------------------------------------------


def test_set_get_unset() -> None:
    config = LocalConfig()
    config.set("session.timeout", "30min")
    config.set("output.spill-cap", "32MiB")
    config.set("context.global-skills", "OFF")
    config.set("mcp.read-only-hint", "no")
    config.set("session.max-per-worker", " 128 ")
    config.set("tunnel.command", 'cloudflared tunnel run --token "$TOKEN"')
    assert config.get("session.timeout") == 1_800_000
    assert config.get("output.spill-cap") == 32 * MIB
    assert config.get("context.global-skills") is False
    assert config.get("mcp.read-only-hint") is False
    assert config.get("session.max-per-worker") == 128
    assert config.get("tunnel.command") == 'cloudflared tunnel run --token "$TOKEN"'
    assert config.get("tunnel.id") is None
    config.unset("session.timeout")
    config.unset("session.timeout")  # unsetting what is not set is fine
    assert config.get("session.timeout") == 7_200_000
    assert "session.timeout" not in config.values


@pytest.mark.parametrize("word", ["true", "on", "yes", "TRUE", " On "])
def test_bool_words_true(word: str) -> None:
    config = LocalConfig()
    config.set("context.workdir-skills", word)
    assert config.get("context.workdir-skills") is True


@pytest.mark.parametrize(
    ("key", "text", "says"),
    [
        ("session.timeout", "2", "no unit"),
        ("session.timeout", "0s", "below the minimum 1ms"),
        ("session.timeout", "-1h", "negative"),
        ("session.kill-grace", "3651d", "above the maximum"),
        ("session.tombstone", "1500ms", "whole seconds"),
        ("worker.idle-exit", "500ms", "below the minimum 1s"),
        ("worker.health-interval", "10ms", "below the minimum 100ms"),
        ("session.max-per-worker", "0", "below the minimum 1"),
        ("session.max-per-worker", "4097", "above the maximum 4096"),
        ("session.max-per-worker", "64k", "plain digits"),
        ("output.inline-limit", "-5", "plain digits"),
        ("output.spill-cap", "0b", "below the minimum"),
        ("history.max-size", "100", "no unit"),
        ("context.workdir-hint", "maybe", "on/off"),
        ("tunnel.id", "  ", "unset"),
        ("tunnel.command", "a\nb", "single line"),
    ],
)
def test_set_rejects(key: str, text: str, says: str) -> None:
    config = LocalConfig()
    with pytest.raises(ConfigError, match=says) as info:
        config.set(key, text)
    assert str(info.value).startswith(key)
    assert config.values == {}


def test_cross_key_rules_leave_the_config_unchanged() -> None:
    config = LocalConfig()
    config.set("session.timeout", "1h")
    before = dict(config.values)
    with pytest.raises(ConfigError, match=r"lower session\.exec-yield first"):
        config.set("session.yield-max", "5s")  # below the 10s exec-yield default
    with pytest.raises(ConfigError, match=r"session\.yield-min = 2min would exceed session\.yield-max"):
        config.set("session.yield-min", "2min")
    with pytest.raises(ConfigError, match=r"session\.timeout-min"):
        config.set("session.timeout-min", "3h")
    with pytest.raises(ConfigError, match=r"session\.timeout-max = 30min would be below session\.timeout"):
        config.set("session.timeout-max", "30min")
    with pytest.raises(ConfigError, match=r"output\.preview"):
        config.set("output.inline-limit", "100")
    with pytest.raises(ConfigError, match=r"output\.inline-limit"):
        config.set("output.preview", "20000")
    assert config.values == before


def test_cross_key_rules_allow_a_consistent_order() -> None:
    config = LocalConfig()
    config.set("session.exec-yield", "2s")
    config.set("session.write-yield", "2s")
    config.set("session.yield-max", "5s")
    config.set("output.preview", "100")
    config.set("output.inline-limit", "100")  # equal is fine
    limits = config.limits()
    assert (limits.exec_yield_ms, limits.yield_max_ms, limits.inline_output_chars) == (2000, 5000, 100)


def test_unset_that_would_break_a_rule_is_refused() -> None:
    config = LocalConfig()
    config.set("session.exec-yield", "2s")
    config.set("session.write-yield", "2s")
    config.set("session.yield-max", "5s")
    with pytest.raises(ConfigError, match=r"cannot unset session\.exec-yield \(default 10s\)"):
        config.unset("session.exec-yield")
    assert config.get("session.exec-yield") == 2000


@pytest.mark.parametrize(
    ("typo", "suggested"),
    [
        ("session.timout", "session.timeout"),
        ("timeout", "session.timeout"),
        ("output.spillcap", "output.spill-cap"),
        ("history.max_age", "history.max-age"),
        ("tunnel.cmd", "tunnel.command"),
    ],
)
def test_unknown_key_suggests_close_matches(typo: str, suggested: str) -> None:
    config = LocalConfig()
    for call in (config.get, config.unset, lambda k: config.set(k, "1s"), lambda k: format_value(k, 1)):
        with pytest.raises(ConfigError, match="unknown key") as info:
            call(typo)
        assert suggested in str(info.value)


def test_unknown_key_without_a_match_points_at_the_list() -> None:
    with pytest.raises(ConfigError, match="config get` lists every key"):
        LocalConfig().get("zzz")


# --- limits() ---------------------------------------------------------------------------------


def test_limits_converts_units() -> None:
    config = LocalConfig()
    config.set("session.timeout", "30min")
    config.set("worker.idle-exit", "2min")
    config.set("session.tombstone", "90s")
    config.set("output.spill-max-age", "2d")
    config.set("output.spill-cap", "1gb")
    config.set("worker.health-interval", "1500ms")
    config.set("session.max-per-worker", "8")
    config.set("limits.max-cmd-chars", "1000")
    config.set("history.max-age", "14d")  # not a limit: no effect on Limits
    limits = config.limits()
    assert limits.timeout_ms == 1_800_000
    assert limits.idle_worker_exit_s == 120
    assert limits.tombstone_s == 90
    assert limits.spill_max_age_s == 2 * 86_400
    assert limits.spill_file_cap_bytes == 1024**3
    assert limits.health_interval_ms == 1500
    assert limits.sessions_per_worker == 8
    assert limits.max_cmd_chars == 1000
    assert limits == Limits(
        timeout_ms=1_800_000,
        idle_worker_exit_s=120,
        tombstone_s=90,
        spill_max_age_s=172_800,
        spill_file_cap_bytes=1024**3,
        health_interval_ms=1500,
        sessions_per_worker=8,
        max_cmd_chars=1000,
    )


def test_items_marks_defaults() -> None:
    config = LocalConfig()
    config.set("history.max-size", "1gb")
    rows = {name: (shown, is_default) for name, shown, is_default in config.items()}
    assert list(rows) == list(KEYS)
    assert rows["history.max-size"] == ("1gb", False)
    assert rows["session.timeout"] == ("2h", True)
    assert rows["tunnel.id"] == ("", True)


# --- the file -----------------------------------------------------------------------------------


def test_config_path_honours_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_path() == tmp_path / "zodex" / "local.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config_path() == tmp_path / ".config" / "zodex" / "local.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "")
    assert config_path() == tmp_path / ".config" / "zodex" / "local.toml"
    # A relative XDG_CONFIG_HOME is invalid per the XDG spec and ignored.
    monkeypatch.setenv("XDG_CONFIG_HOME", "rel")
    assert config_path() == tmp_path / ".config" / "zodex" / "local.toml"


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert LocalConfig.load(tmp_path / "nope" / "local.toml") == LocalConfig()


def test_save_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "zodex" / "local.toml"
    config = LocalConfig()
    for key, text in [
        ("session.timeout", "30min"),
        ("session.max-per-worker", "8"),
        ("output.spill-cap", "1536kb"),
        ("mcp.read-only-hint", "off"),
        ("context.workdir-hint", "off"),
        ("tunnel.id", "zodex-laptop"),
        ("tunnel.command", 'tunnel --name "a b" --path C:\\x'),
        ("history.max-age", "14d"),
    ]:
        config.set(key, text)
    config.save(path)
    assert LocalConfig.load(path) == config
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# ")
    assert '[session]\ntimeout = "30min"\nmax-per-worker = 8\n' in text
    assert 'spill-cap = "1536kb"' in text
    assert "read-only-hint = false" in text
    assert 'workdir-hint = "off"' in text
    assert "[worker]" not in text  # only what was set
    if sys.platform != "win32":
        assert path.stat().st_mode & 0o777 == 0o644


def test_the_file_is_written_as_before() -> None:
    config = LocalConfig()
    config.set("tunnel.command", 'run "a b" C:\\x')
    config.set("session.timeout", "30min")
    config.set("mcp.read-only-hint", "off")
    config.set("session.max-per-worker", "8")
    assert config.to_toml() == (
        "# Zodex Local configuration (written by `zodex local config set`).\n"
        "# Only keys set explicitly are here; `zodex local config get` shows every key with its default.\n"
        "# Durations need a unit (ms, s, min, h, d); sizes are 1024-based (kb, mb, gb).\n"
        "\n"
        "[session]\n"
        'timeout = "30min"\n'
        "max-per-worker = 8\n"
        "\n"
        "[tunnel]\n"
        'command = "run \\"a b\\" C:\\\\x"\n'
        "\n"
        "[mcp]\n"
        "read-only-hint = false\n"
    )
    assert LocalConfig().to_toml().count("\n") == 3, "an empty config is the header alone"


def test_save_of_an_empty_config_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "local.toml"
    LocalConfig().save(path)
    assert LocalConfig.load(path) == LocalConfig()


def test_save_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "local.toml"
    old = LocalConfig()
    old.set("session.timeout", "1h")
    old.save(path)
    before = path.read_bytes()

    def fail(src: object, dst: object) -> None:
        raise OSError("disk full")

    new = LocalConfig()
    new.set("session.timeout", "5min")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        new.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["local.toml"]  # no temp file left behind


def test_hand_written_file(tmp_path: Path) -> None:
    path = tmp_path / "local.toml"
    path.write_text(
        "# mine\n"
        'session.timeout = "90min"\n'  # dotted keys at the top level are the same thing
        "[output]\n"
        "inline-limit = 20000\n"
        'preview = "5000"\n'
        "[context]\n"
        "global-skills = false\n"
        'workdir-hint = "no"\n'
        "[tunnel]\n"
        "id = 7\n",
        encoding="utf-8",
    )
    config = LocalConfig.load(path)
    assert config.values == {
        "session.timeout": 5_400_000,
        "output.inline-limit": 20_000,
        "output.preview": 5000,
        "context.global-skills": False,
        "context.workdir-hint": False,
        "tunnel.id": "7",
    }


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[session\ntimeout = 1", "not valid TOML"),
        ("[session]\ntimeout = 7200\n", r"session\.timeout: '7200' has no unit"),
        ('[session]\ntimeout = "soon"\n', r"session\.timeout: not a duration"),
        ("[session]\ntimeout = 1.5\n", r"session\.timeout: expected a duration"),
        ('[session]\nmax-per-worker = "lots"\n', r"session\.max-per-worker"),
        ("[session]\nmax-per-worker = true\n", r"session\.max-per-worker: expected a whole number"),
        ('[mcp]\nread-only-hint = "perhaps"\n', r"mcp\.read-only-hint"),
        ("[context]\nworkdir-hint = 1\n", r"context\.workdir-hint"),
        ('[session]\ntimout = "1h"\n', r"unknown key 'session\.timout'; did you mean session\.timeout"),
        ("timeout = 5\n", "unknown key 'timeout'"),
        ('[session.deep]\ntimeout = "1h"\n', "unknown key 'session.deep'"),
        ('[session]\nyield-max = "5s"\n', r"session\.exec-yield \(10s\) must not exceed session\.yield-max"),
    ],
)
def test_load_names_the_problem(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "local.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=says) as info:
        LocalConfig.load(path)
    assert str(info.value).startswith(f"{path}: ")


def test_load_of_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "local.toml"
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ConfigError, match="cannot read"):
        LocalConfig.load(path)
