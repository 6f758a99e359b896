"""The space history keeps for completing calls on a full disk (docs/history.md#recording)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from zodex_gateway.history import HistoryStore, HistoryUnavailable
from zodex_gateway.history.reserve import RESERVE_NAME, SpaceReserve, is_disk_full


def test_reserve_takes_real_space_and_gives_it_back(tmp_path: Path) -> None:
    reserve = SpaceReserve(tmp_path / "r", size=256 * 1024)
    assert reserve.ensure() and reserve.present and not reserve.spent
    assert (tmp_path / "r").stat().st_blocks * 512 >= 256 * 1024, "allocated, not sparse"
    assert reserve.ensure(), "cheap when present"
    assert reserve.release() and reserve.spent and not (tmp_path / "r").exists()
    assert not reserve.release(), "nothing left to give"
    assert reserve.ensure() and not reserve.spent


def test_a_full_database_is_recognised(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.execute("PRAGMA max_page_count = 3")
    with pytest.raises(sqlite3.Error) as full:
        conn.execute("INSERT INTO t VALUES (zeroblob(100000))")
    conn.close()
    assert is_disk_full(full.value)
    assert not is_disk_full(sqlite3.OperationalError("no such table"))
    assert not is_disk_full(OSError("x"))


def test_the_owner_keeps_a_reserve_and_output_waits_while_it_is_spent(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    try:
        assert (tmp_path / RESERVE_NAME).exists()
        store._reserve.release()  # as an essential write on a full disk does
        with pytest.raises(HistoryUnavailable, match="disk is full"):
            store.append_output([("h1", "text")])
        store.begin(
            agent_id=None, tool_name="exec_command", args={}, declared_workdir=None, real_workdir=None
        )
        assert (tmp_path / RESERVE_NAME).exists(), "made again at the next call"
        store.append_output([("h1", "text")])
    finally:
        store.close()


def test_a_reader_makes_no_reserve(tmp_path: Path) -> None:
    HistoryStore(tmp_path).close()
    (tmp_path / RESERVE_NAME).unlink()
    HistoryStore(tmp_path, recover=False).close()
    assert not (tmp_path / RESERVE_NAME).exists()
