"""The history file on disk: private modes, WAL, and refusing to record when it cannot."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.gateway.history.history_support import raw_db
from zodex_gateway.history import DB_NAME, HISTORY_SCHEMA, HistoryStore, HistoryUnavailable
from zodex_gateway.history.reserve import RESERVE_NAME
from zodex_gateway.history.storage import SEGMENTS_DIR

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
REFUSAL_PREFIX = "history cannot record this call (disk full?): "
REFUSAL_SUFFIX = "; nothing was run"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _begin(store: HistoryStore, **args: object) -> str:
    return store.begin(
        agent_id=None,
        tool_name="exec_command",
        args={"cmd": "true", "workdir": "/tmp", **args},
        declared_workdir="/tmp",
        real_workdir="/tmp",
    )


@posix_only
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_directory_is_0700_and_files_0600_whatever_the_umask(history_dir: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        with HistoryStore(history_dir) as store:
            _begin(store)  # the -wal and -shm files exist while the store is open
            store.append_output([("h1", "some output\n" * 400)])  # enough for a segment
            files = sorted(p.name for p in history_dir.iterdir())
            assert files == [RESERVE_NAME, DB_NAME, f"{DB_NAME}-shm", f"{DB_NAME}-wal", SEGMENTS_DIR]
            assert _mode(history_dir) == _mode(history_dir / SEGMENTS_DIR) == 0o700
            for name in files[:-1]:
                assert _mode(history_dir / name) == 0o600, name
            (segment,) = (history_dir / SEGMENTS_DIR).iterdir()
            assert segment.name == "1.zst" and _mode(segment) == 0o600
            assert segment.stat().st_uid == os.geteuid()
    finally:
        os.umask(old)


@posix_only
def test_reopening_tightens_loose_modes_but_never_widens(history_dir: Path) -> None:
    HistoryStore(history_dir).close()
    os.chmod(history_dir, 0o755)
    os.chmod(history_dir / DB_NAME, 0o644)
    HistoryStore(history_dir).close()
    assert _mode(history_dir) == 0o700
    assert _mode(history_dir / DB_NAME) == 0o600


def test_wal_mode_and_schema_version(store: HistoryStore, history_dir: Path) -> None:
    with raw_db(history_dir) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == HISTORY_SCHEMA
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"agents", "invocations", "file_changes", "processes", "output_chunks"} <= tables


def test_a_newer_schema_is_refused_with_a_clear_message(history_dir: Path) -> None:
    HistoryStore(history_dir).close()
    with raw_db(history_dir) as conn:
        conn.execute(f"PRAGMA user_version = {HISTORY_SCHEMA + 1}")
    with pytest.raises(HistoryUnavailable, match="newer Zodex"):
        HistoryStore(history_dir)


def test_a_path_that_cannot_be_a_directory_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(HistoryUnavailable, match="history cannot open"):
        HistoryStore(blocker / "history")


# Runs in a child process: as root (permission bits do not stop root) the child first
# drops to an unprivileged user, over a directory that user owns.
_READ_ONLY_SCRIPT = """
import json, os, sys
from pathlib import Path
from zodex_gateway.history import DB_NAME, HistoryStore, HistoryUnavailable
if os.geteuid() == 0:
    os.setegid(65534)
    os.seteuid(65534)
directory = Path(sys.argv[1]) / "history"
call = dict(agent_id=None, tool_name="exec_command", args={"cmd": "true"}, declared_workdir=None, real_workdir=None)
with HistoryStore(directory) as store:
    done = store.begin(**call)
    store.complete(done, ok=True, result="fine")
os.chmod(directory / DB_NAME, 0o400)
report = {"done": done}
with HistoryStore(directory) as store:
    try:
        store.begin(**call)
        report["refused"] = None
    except HistoryUnavailable as exc:
        report["refused"] = str(exc)
    report["ids"] = [inv.id for inv in store.invocations()]
report["mode"] = os.stat(directory / DB_NAME).st_mode & 0o777
print(json.dumps(report))
"""


@posix_only
def test_read_only_file_refuses_the_call_but_still_reads() -> None:
    base = Path(tempfile.mkdtemp(prefix="zodex-history-ro-"))
    try:
        if os.geteuid() == 0:
            os.chown(base, 65534, 65534)
        child = subprocess.run(
            [sys.executable, "-c", _READ_ONLY_SCRIPT, str(base)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=Path(__file__).resolve().parents[3],
            check=False,
        )
        assert child.returncode == 0, child.stderr
        report = json.loads(child.stdout)
    finally:
        shutil.rmtree(base)
    message = report["refused"]
    assert message is not None and "\n" not in message
    assert message == f"{REFUSAL_PREFIX}attempt to write a readonly database{REFUSAL_SUFFIX}"
    assert report["ids"] == [report["done"]]
    assert report["mode"] == 0o400  # opening did not "repair" it


def test_full_disk_refuses_the_call_and_records_nothing(store: HistoryStore) -> None:
    done = _begin(store)
    # A page cap is SQLite's own way to run out of space (as root, permission bits
    # would not stop a write); it applies to this store's connection only.
    conn = store._db.conn
    assert conn is not None
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(HistoryUnavailable) as refused:
        _begin(store, padding="x" * 200_000)
    message = str(refused.value)
    assert "\n" not in message
    assert message == f"{REFUSAL_PREFIX}database or disk is full{REFUSAL_SUFFIX}"
    assert [inv.id for inv in store.invocations()] == [done]


def test_a_write_lock_held_elsewhere_refuses_after_the_busy_timeout(history_dir: Path) -> None:
    with HistoryStore(history_dir, busy_timeout_s=0.05) as store, raw_db(history_dir) as other:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(HistoryUnavailable, match=r"database is locked; nothing was run$"):
            _begin(store)
        other.execute("ROLLBACK")
        _begin(store)


def test_a_closed_store_refuses_instead_of_crashing(history_dir: Path) -> None:
    store = HistoryStore(history_dir)
    store.close()
    store.close()  # idempotent
    with pytest.raises(HistoryUnavailable, match="history is closed; nothing was run"):
        _begin(store)
