"""`zodex local config set` with bad values (docs/config.md#configuration-and-limits): every key refuses every
bad value of its kind with one line on stderr and exit status 2, and the file stays as it was,
including values that look like options (``-1``, ``-5s``, ``--help``, ``--``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.local import LocalEnv, local_env
from zodex_gateway.cli import cli
from zodex_gateway.config.settings import KEYS, ConfigKey, format_value

LOOKS_LIKE_AN_OPTION = ("-1", "--help", "-h", "--", "--help=x")
NOT_UTF8 = "a\udcffb"  # the bytes b"a\xffb" as Python receives them in argv


def bad_values(key: ConfigKey) -> list[str]:
    """Values ``key`` must refuse: malformed for its kind, out of its range, or option-like."""
    if key.kind == "string":
        if key.name == "mcp.token":
            return [*LOOKS_LIKE_AN_OPTION, "forever", "", NOT_UTF8]
        return ["", " ", "a\nb", "a\tb", "a\x7fb", "a\u2028b", "a\x85b", NOT_UTF8]
    if key.kind in ("bool", "switch"):
        return [*LOOKS_LIKE_AN_OPTION, "maybe", "", NOT_UTF8]
    values = [*LOOKS_LIKE_AN_OPTION, "", "1.5", NOT_UTF8, "9" * 40]
    assert key.minimum is not None and key.maximum is not None, key
    values += [format_value(key.name, key.minimum - 1), format_value(key.name, key.maximum + 1)]
    if key.kind == "int":
        values += ["abc", "+5", "0x10", "1_000"]
    else:  # durations and sizes always carry a unit
        values += ["-5" + ("s" if key.kind == "duration" else "mb"), "5", "5 parsecs"]
    if key.limits_field is not None and key.limits_field.endswith("_s"):
        values.append("1500ms")  # kept in whole seconds
    return values


CASES = [(name, value) for name, key in KEYS.items() for value in bad_values(key)]
# Values each fine alone that contradict another key's value.
CONTRADICTIONS = [
    ("session.yield-min", "2min"),
    ("session.yield-max", "10ms"),
    ("session.timeout-min", "3h"),
    ("output.preview", "100000"),
]


@pytest.fixture(scope="module")
def local() -> Iterator[LocalEnv]:
    with local_env() as env:
        env.run("local", "config", "set", "mcp.port", "8765")  # a file with something in it
        yield env


def config_files(local: LocalEnv) -> dict[str, bytes]:
    folder = local.root / "config" / "zodex"
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def assert_one_line_refusal(code: int, stdout: str, stderr: str, key: str) -> None:
    assert code == 2, (code, stdout, stderr)
    assert stdout == ""
    assert stderr.startswith("error: ") and stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    assert key in stderr, stderr


def test_every_key_refuses_every_bad_value_in_one_line(local: LocalEnv) -> None:
    """The same click command the entry point runs, in process: a few hundred cases in a second."""
    before = config_files(local)
    assert b"port = 8765" in before["local.toml"]
    runner = CliRunner()
    for key, value in [*CASES, *CONTRADICTIONS]:
        done = runner.invoke(cli, ["local", "config", "set", key, value], env=local.env())
        assert done.exception is None or isinstance(done.exception, SystemExit), (key, value, done)
        assert_one_line_refusal(done.exit_code, done.stdout, done.stderr, key)
        assert config_files(local) == before, f"{key} {value!r} changed the file"
    assert {name for name, _ in CASES} == set(KEYS), "every key was tried"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "mcp.port",
            "-1",
            "number cannot be negative: '-1'; give a whole number written as plain digits (e.g. 16000)",
        ),
        ("mcp.port", "65536", "65536 is above the maximum 65535"),
        ("mcp.port", "--", "expected a whole number written as plain digits (e.g. 16000), got '--'"),
        ("session.timeout", "-5s", "duration cannot be negative: '-5s'; give "),
        ("history.max-size", "--help", "not a size: '--help'; give "),
        ("session.cgroups", "-1", "expected on/off (also true/false, yes/no), got '-1'"),
        ("mcp.token", "-h", "expected per-start or persistent, got '-h'"),
        ("tunnel.id", NOT_UTF8, "not valid UTF-8: b'a\\xffb'"),
        ("tunnel.command", "a\u2028b", "must be a single line without control characters"),
    ],
)
def test_the_installed_command_refuses_in_one_line(
    local: LocalEnv, key: str, value: str, message: str
) -> None:
    before = config_files(local)
    done = local.run("local", "config", "set", key, value, check=False)
    assert_one_line_refusal(done.returncode, done.stdout, done.stderr, key)
    assert done.stderr.startswith(f"error: {key}: {message}"), done.stderr
    assert config_files(local) == before
    assert local.run("local", "config", "get", "mcp.port").stdout == "8765\n"


def test_a_string_value_may_begin_with_a_dash_and_help_still_works(local: LocalEnv) -> None:
    set_it = local.run("local", "config", "set", "tunnel.command", "--verbose -x")
    assert set_it.stdout == "tunnel.command = --verbose -x\n"
    assert local.run("local", "config", "get", "tunnel.command").stdout == "--verbose -x\n"
    assert local.run("local", "config", "set", "--", "tunnel.id", "--help").stdout == "tunnel.id = --help\n"
    helped = local.run("local", "config", "set", "--help")
    assert helped.stdout.startswith("Usage: zodex local config set [OPTIONS] KEY VALUE\n")
    for key in ("tunnel.command", "tunnel.id"):
        local.run("local", "config", "unset", key)


def test_a_config_directory_that_cannot_be_made_is_one_line_and_exit_1() -> None:
    # Nothing can be created under /proc, not even by root (the tests run as root).
    unmakeable = "/proc/zodex-no-such-directory"
    with local_env() as local:
        done = local.run(
            "local", "config", "set", "mcp.port", "8765", check=False, XDG_CONFIG_HOME=unmakeable
        )
        assert done.returncode == 1 and done.stdout == ""
        assert (
            done.stderr == f"error: cannot write {unmakeable}/zodex/local.toml: No such file or directory\n"
        )
        assert not Path(unmakeable).exists()
