"""The operator CLI without a runtime: `zodex local config unset`, and the commands that only
read files (status, stop, config, logs, history, mcp-config) importing nothing of the server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.local import ZODEX, LocalEnv, local_env
from zodex_gateway.cli import cli

# What serving needs and reading a file does not.
SERVER_MODULES = (
    "mcp",
    "starlette",
    "uvicorn",
    "zmq",
    "httpx",
    "httpx2",
    "textual",
    "zodex_gateway.mcp",
    "zodex_gateway.observer",
    "zodex_gateway.serve",
    "zodex_gateway.workers",
    "zodex_gateway.viewers",
)


@pytest.fixture
def local() -> Iterator[LocalEnv]:
    with local_env() as env:
        yield env


def zodex(local: LocalEnv, *args: str) -> Result:
    return CliRunner().invoke(cli, ["local", *args], env=local.env())


def test_unset_puts_a_key_back_to_its_default(local: LocalEnv) -> None:
    assert zodex(local, "config", "set", "session.timeout", "30min").exit_code == 0
    done = zodex(local, "config", "unset", "session.timeout")
    assert done.exit_code == 0, done.output
    assert done.output == "session.timeout = 2h  (default)\n"
    assert zodex(local, "config", "get", "session.timeout").output == "2h\n"
    again = zodex(local, "config", "unset", "session.timeout")
    assert again.exit_code == 0, "unsetting what is not set is fine"


def test_logs_refuses_a_negative_line_count(local: LocalEnv) -> None:
    """-1 lines is a mistake, not an empty tail."""
    for lines in ("-1", "-5"):
        done = zodex(local, "logs", "--lines", lines)
        assert done.exit_code == 2, done.output
        assert f"Invalid value for '--lines' / '-n': {lines} is not in the range x>=0." in done.output
    assert zodex(local, "logs", "--lines", "0").exit_code == 0


def test_unset_refuses_an_unknown_key_and_a_contradiction_and_changes_nothing(local: LocalEnv) -> None:
    unknown = zodex(local, "config", "unset", "session.timeuot")
    assert (
        unknown.exit_code == 2
        and "unknown key 'session.timeuot'; did you mean session.timeout" in unknown.output
    )
    for key, value in (
        ("session.exec-yield", "2s"),
        ("session.write-yield", "2s"),
        ("session.yield-max", "5s"),
    ):
        assert zodex(local, "config", "set", key, value).exit_code == 0
    before = (local.root / "config" / "zodex" / "local.toml").read_text()
    refused = zodex(local, "config", "unset", "session.exec-yield")
    assert refused.exit_code == 2
    assert refused.output.startswith("error: cannot unset session.exec-yield (default 10s)")
    assert (local.root / "config" / "zodex" / "local.toml").read_text() == before


def test_an_empty_string_names_the_command_that_goes_back_to_the_default(local: LocalEnv) -> None:
    done = zodex(local, "config", "set", "tunnel.id", " ")
    assert done.exit_code == 2
    assert f"`{ZODEX} local config unset tunnel.id` goes back to the default" in done.output
    assert zodex(local, "config", "unset", "tunnel.id").exit_code == 0, "and that command exists"


IMPORTS_AFTER = """
import json, sys
from zodex_gateway.cli import cli

for args in json.loads(sys.argv[1]):
    try:
        cli.main(["local", *args], prog_name="zodex", standalone_mode=False)
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def modules_after(local: LocalEnv, *commands: list[str]) -> set[str]:
    """Every module loaded by one process that ran ``commands`` in turn."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_AFTER, json.dumps(commands)],
        env=local.env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stderr.splitlines()[-1])
    return set(loaded)


def server_modules(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if any(m == s or m.startswith(f"{s}.") for s in SERVER_MODULES))


def test_commands_that_read_files_load_nothing_of_the_server(local: LocalEnv) -> None:
    assert zodex(local, "setup").exit_code == 0
    loaded = modules_after(
        local,
        ["status"],
        ["status", "--json"],
        ["stop"],
        ["config", "get"],
        ["config", "set", "session.timeout", "30min"],
        ["config", "unset", "session.timeout"],
        ["logs"],
        ["history"],
        ["history", "--format", "json"],
        ["mcp-config"],
    )
    assert "zodex_gateway.cli" in loaded and "zodex_gateway.history" in loaded, "the commands ran"
    assert server_modules(loaded) == []


def test_status_of_a_crashed_runtime_loads_nothing_of_the_server(local: LocalEnv) -> None:
    assert zodex(local, "setup").exit_code == 0
    dead = subprocess.Popen(["true"])  # a pid that no longer runs
    dead.wait()
    discovery = {
        "runtime_id": "r" * 12,
        "pid": dead.pid,
        "pid_start": 1,
        "start_directory": str(local.root),
        "started_at": "2025-01-01T00:00:00Z",
        "expires_at": None,
        "mcp": {"url": "http://127.0.0.1:9/mcp", "token_path": str(local.root / "token")},
        "runtime_dir": str(local.root / "run" / "gone"),
    }
    local.discovery_file.write_text(json.dumps(discovery))
    loaded = modules_after(local, ["status"], ["stop"])
    assert "zodex_gateway.local.crash" in loaded, "status read the crashed runtime"
    assert server_modules(loaded) == []
    assert not local.discovery_file.exists(), "stop cleaned up after it"


@pytest.mark.timeout(60)
def test_status_of_a_running_runtime_loads_only_what_asks_its_workers(local: LocalEnv) -> None:
    local.run("local", "start")
    loaded = modules_after(local, ["status"], ["status", "--json"])
    assert "zmq" in loaded, "status asked the workers how many commands run"
    assert server_modules(loaded) == ["zmq", *sorted(m for m in loaded if m.startswith("zmq."))]
