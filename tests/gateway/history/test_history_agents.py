"""Agents in history (docs/agents.md#identity): random short ids, kept per identity key, one per key."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.gateway.history.history_support import Clock, count_rows, exec_call
from zodex_gateway.history import DB_NAME, HistoryStore

AGENT_ID = re.compile(r"^[a-z0-9]{4}$")
SECRET_KEY = "openai-session-7f3a9c-SECRET-conversation-key"


def test_ids_are_four_characters_and_distinct_per_key(store: HistoryStore) -> None:
    records = [store.agent_for(f"conversation-{n}") for n in range(50)]
    assert all(AGENT_ID.match(r.agent_id) for r in records)
    assert len({r.agent_id for r in records}) == 50
    assert store.agent_for("conversation-7").agent_id == records[7].agent_id


def test_same_key_keeps_its_id_across_reopen(history_dir: Path) -> None:
    with HistoryStore(history_dir) as store:
        first = store.agent_for("conversation-a").agent_id
        other = store.agent_for("conversation-b").agent_id
    with HistoryStore(history_dir) as store:
        assert store.agent_for("conversation-a").agent_id == first
        assert store.agent_for("conversation-b").agent_id == other
        assert [a.agent_id for a in store.agents()] == [first, other]


def test_last_seen_moves_first_seen_stays(store: HistoryStore, clock: Clock) -> None:
    created = store.agent_for("conversation")
    clock.advance(30)
    again = store.agent_for("conversation")
    assert (again.first_seen, again.last_seen) == (created.first_seen, created.first_seen + 30)
    assert store.agent(created.agent_id) == again
    assert store.agent("zzzz") is None


def test_a_call_moves_last_seen_at_most_once_a_second(store: HistoryStore, clock: Clock) -> None:
    agent = store.agent_for("conversation")
    clock.advance(0.5)
    exec_call(store, agent_id=agent.agent_id)
    assert store.agent(agent.agent_id) == agent, "within a second of the last write: not written"
    clock.advance(0.5)
    exec_call(store, agent_id=agent.agent_id)
    moved = store.agent(agent.agent_id)
    assert moved is not None and moved.last_seen == agent.first_seen + 1.0
    clock.advance(0.9)
    exec_call(store, agent_id=agent.agent_id)
    assert store.agent(agent.agent_id) == moved
    clock.advance(-60)  # a clock set back: the next call writes at once, never backwards
    exec_call(store, agent_id=agent.agent_id)
    clock.advance(61.5)
    exec_call(store, agent_id=agent.agent_id)
    last = store.agent(agent.agent_id)
    assert last is not None and last.last_seen == clock.now


def test_twelve_concurrent_first_calls_from_two_processes_make_one_agent(history_dir: Path) -> None:
    # Two stores over one directory stand for two gateway processes: each has its own
    # connection, so they only agree through SQLite's locking.
    stores = [HistoryStore(history_dir), HistoryStore(history_dir)]
    try:
        start = threading.Barrier(12)

        def first_call(n: int) -> str:
            start.wait(timeout=10)
            return stores[n % 2].agent_for(SECRET_KEY).agent_id

        with ThreadPoolExecutor(max_workers=12) as pool:
            ids = list(pool.map(first_call, range(12)))
    finally:
        for store in stores:
            store.close()
    assert len(set(ids)) == 1
    assert count_rows(history_dir, "agents") == 1


def test_identity_keys_never_reach_the_files(history_dir: Path) -> None:
    with HistoryStore(history_dir) as store:
        agent = store.agent_for(SECRET_KEY)
        store.set_alias(agent.agent_id, "Rindle implementation")
        files = sorted(p for p in history_dir.iterdir() if p.is_file())
        assert len(files) == 4  # the database, its WAL and shared memory, all open; the reserve
        assert list((history_dir / "output").iterdir()) == []  # no output yet
        for path in files:
            assert b"SECRET" not in path.read_bytes(), path.name
    assert SECRET_KEY not in repr(agent)
    assert b"SECRET" not in (history_dir / DB_NAME).read_bytes()


def test_alias_set_clear_and_last_write_wins(history_dir: Path) -> None:
    with HistoryStore(history_dir) as one, HistoryStore(history_dir) as two:
        agent_id = one.agent_for("conversation").agent_id
        assert one.set_alias(agent_id, "Rindle implementation").alias == "Rindle implementation"
        assert two.set_alias(agent_id, "Rindle — phase 2 ✓").alias == "Rindle — phase 2 ✓"
        assert one.agent(agent_id) is not None
        assert one.agent_for("conversation").alias == "Rindle — phase 2 ✓"
        assert one.set_alias(agent_id, None).alias is None
        assert two.set_alias(agent_id, "again").alias == "again"
        assert two.set_alias(agent_id, "").alias is None
    with HistoryStore(history_dir) as store:
        assert store.agents()[0].alias is None


def test_alias_of_an_unknown_agent_is_a_key_error(store: HistoryStore) -> None:
    with pytest.raises(KeyError):
        store.set_alias("zzzz", "nobody")


_FIRST_CALLS_SCRIPT = """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from zodex_gateway.history import HistoryStore
with HistoryStore(Path(sys.argv[1])) as store:
    print("ready", flush=True)
    sys.stdin.readline()  # every process starts calling at once
    with ThreadPoolExecutor(max_workers=6) as pool:
        ids = set(pool.map(lambda _: store.agent_for(sys.argv[2]).agent_id, range(6)))
print(" ".join(sorted(ids)), flush=True)
"""


def test_first_calls_in_two_real_processes_make_one_agent(history_dir: Path) -> None:
    HistoryStore(history_dir).close()  # created and migrated; the race is over the agent only
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _FIRST_CALLS_SCRIPT, str(history_dir), SECRET_KEY],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[3],
        )
        for _ in range(2)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=30)[0].split() for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert outputs[0] == outputs[1] and len(outputs[0]) == 1
    assert count_rows(history_dir, "agents") == 1
