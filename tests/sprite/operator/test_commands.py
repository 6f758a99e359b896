"""`zodex sprite connect`, `rotate-key`, `logs` and `status` without a service, as root and
as another account."""

from __future__ import annotations

import json
import os
import pwd
import queue
import subprocess
import threading
from pathlib import Path

from tests.sprite.operator.conftest import ZODEX, Sprite
from tests.sprite.operator.test_setup import one_line_error, owner_mode
from tests.support.second_user import require_second_user, run_as_second_user, second_user_python
from tests.support.waiting import wait_until

ZODEX_MAIN = "import sys; from zodex_gateway.cli import main; sys.argv[0] = 'zodex'; main()"


def test_connect_prints_the_url_to_root_only(ready_sprite: Sprite) -> None:
    sprite = ready_sprite
    key = sprite.key_file.read_text().strip()
    shown = sprite.run("connect")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"http://sprite.test:18080/mcp?key={key}\n"

    require_second_user()
    refused = run_as_second_user(
        [*second_user_python(), "-c", ZODEX_MAIN, "sprite", "connect", "--config", str(sprite.config)]
    )
    one_line_error(refused, "zodex sprite connect must run as root")
    assert key not in refused.stdout + refused.stderr


def test_connect_without_setup_says_so(sprite: Sprite) -> None:
    one_line_error(
        sprite.run("connect"), f"{sprite.config}: no such config file; run `zodex sprite setup` first"
    )


def test_rotate_key_replaces_the_key_file(ready_sprite: Sprite) -> None:
    sprite = ready_sprite
    old = sprite.key_file.read_text().strip()
    rotated = sprite.run("rotate-key")
    assert rotated.returncode == 0, rotated.stderr
    new = sprite.key_file.read_text().strip()
    assert new != old and len(new) >= 43
    assert owner_mode(sprite.key_file) == (sprite.service, sprite.group, 0o600)
    assert rotated.stdout.splitlines()[-1] == f"http://sprite.test:18080/mcp?key={new}"
    assert sprite.run("connect").stdout.strip().endswith(new)
    assert [p.name for p in sprite.state.iterdir() if p.name.startswith(".")] == [], "no temporary file left"


def test_rotate_key_as_another_user_is_refused(ready_sprite: Sprite) -> None:
    require_second_user()
    before = ready_sprite.key_file.read_text()
    refused = run_as_second_user(
        [
            *second_user_python(),
            "-c",
            ZODEX_MAIN,
            "sprite",
            "rotate-key",
            "--config",
            str(ready_sprite.config),
        ]
    )
    one_line_error(refused, "zodex sprite rotate-key must run as root")
    assert ready_sprite.key_file.read_text() == before


def test_status_without_a_service_is_not_running(ready_sprite: Sprite) -> None:
    one_line_error(ready_sprite.run("status"), "Zodex Sprite is not running: no status file at")
    as_json = ready_sprite.run("status", "--json")
    assert as_json.returncode == 1
    info = json.loads(as_json.stdout)
    assert info["running"] is False and info["agent_user"] == ready_sprite.agent
    assert info["public_url"] == "http://sprite.test:18080"


def test_status_with_a_dead_pid_is_not_running(ready_sprite: Sprite) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    status_file = ready_sprite.state / "status.json"
    status_file.write_text(json.dumps({"pid": gone.pid, "port": 18080, "version": "0", "started_at": "x"}))
    one_line_error(ready_sprite.run("status"), f"the service (pid {gone.pid}) is gone")
    # A live pid that is not a Sprite (this test's own process) is not taken for one.
    status_file.write_text(json.dumps({"pid": os.getpid()}))
    one_line_error(ready_sprite.run("status"), f"the service (pid {os.getpid()}) is gone")
    # Nor is a process of another account whose command line says "sprite serve": the
    # agent can start one with any arguments, e.g. on the pid of a service that is gone.
    agent_uid = pwd.getpwnam(ready_sprite.agent).pw_uid
    lookalike = subprocess.Popen(
        ["setpriv", f"--reuid={agent_uid}", "--regid=65534", "--clear-groups",
         "/bin/bash", "-c", "read -r _", "sprite", "serve"],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until(
            lambda: b"serve" in Path(f"/proc/{lookalike.pid}/cmdline").read_bytes(), what="the lookalike"
        )
        status_file.write_text(json.dumps({"pid": lookalike.pid}))
        one_line_error(ready_sprite.run("status"), f"the service (pid {lookalike.pid}) is gone")
    finally:
        lookalike.kill()
        lookalike.communicate()


def test_logs_prints_the_last_lines(ready_sprite: Sprite) -> None:
    log = ready_sprite.state / "logs" / "sprite.log"
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    shown = ready_sprite.run("logs", "--lines", "3")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "line 97\nline 98\nline 99\n"


def test_logs_follow_prints_lines_as_they_are_written(ready_sprite: Sprite) -> None:
    log = ready_sprite.state / "logs" / "sprite.log"
    log.write_text("before\n")
    follower = subprocess.Popen(
        [ZODEX, "sprite", "logs", "--follow", "--config", str(ready_sprite.config)],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert follower.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout or ()], daemon=True)
    reader.start()
    try:
        assert lines.get(timeout=10) == "before\n"
        with log.open("a") as out:
            out.write("after\n")
        assert lines.get(timeout=10) == "after\n"
        # Rotation: the log renamed away and a new one started.
        log.rename(log.with_name("sprite.log.1"))
        log.write_text("rotated\n")
        assert lines.get(timeout=10) == "rotated\n"
    finally:
        follower.terminate()
        follower.wait(10)
        reader.join(10)
        follower.stdout.close()


def test_logs_without_a_state_directory_says_so(ready_sprite: Sprite) -> None:
    import shutil

    shutil.rmtree(ready_sprite.state / "logs")
    one_line_error(ready_sprite.run("logs"), f"no log directory {Path(ready_sprite.state / 'logs')}")


RAW_CONTROLS = "\x1b[2J\x1b]0;owned\x07\r\x00\x7f\x85\x9b31m\u2028\u2029\u202e\u2066"


def test_logs_never_print_a_raw_control_character(ready_sprite: Sprite) -> None:
    """Whatever is in the file (an older log, a line written by something else), what
    `logs` prints holds no control character, escape sequence or bidi override."""
    log = ready_sprite.state / "logs" / "sprite.log"
    log.write_text(f"ok line\nworker for /w/{RAW_CONTROLS}x started\n", encoding="utf-8")
    shown = ready_sprite.run("logs", "--lines", "2")
    assert shown.returncode == 0, shown.stderr
    first, second = shown.stdout.splitlines()
    assert first == "ok line"
    assert second == (
        "worker for /w/\\x1b[2J\\x1b]0;owned\\x07\\r\\x00\\x7f\\x85\\x9b31m\\u2028\\u2029\\u202e\\u2066x started"
    )
    assert all(ch.isprintable() for ch in shown.stdout.replace("\n", ""))


def test_logs_follow_never_prints_a_raw_control_character(ready_sprite: Sprite) -> None:
    log = ready_sprite.state / "logs" / "sprite.log"
    log.write_text("before\n")
    follower = subprocess.Popen(
        [ZODEX, "sprite", "logs", "--follow", "--config", str(ready_sprite.config)],
        stdout=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    lines: queue.Queue[str] = queue.Queue()
    assert follower.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout or ()], daemon=True)
    reader.start()
    try:
        assert lines.get(timeout=10) == "before\n"
        with log.open("a", encoding="utf-8") as out:
            out.write(f"after {RAW_CONTROLS}\n")
        shown = lines.get(timeout=10)
        assert shown.startswith("after \\x1b[2J") and all(ch.isprintable() for ch in shown.rstrip("\n"))
    finally:
        follower.terminate()
        follower.wait(10)
        reader.join(10)
        follower.stdout.close()
