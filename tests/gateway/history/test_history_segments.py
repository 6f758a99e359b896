"""Command output in segment files: private files, removed with their rows, and what a
crash, a damaged or planted file and a full disk leave (docs/history.md#output-files)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.gateway.history.history_support import Clock, count_rows, exec_call, raw_db
from tests.support.second_user import require_second_user, run_as_second_user, world_tree_dir
from zodex_gateway.history import HistoryStore, HistoryUnavailable, clear_history
from zodex_gateway.history.chunks import FLOOD_CHARS, FLOOD_EVENT_CHARS, INLINE_BYTES, MAX_CHUNK_CHARS
from zodex_gateway.history.records import OUTPUT_LOST
from zodex_gateway.history.segments import MIN_SEGMENT_TEXT_BYTES, SEGMENT_TEXT_BYTES, STORED
from zodex_gateway.history.storage import SEGMENTS_DIR

REPO = Path(__file__).resolve().parents[3]
KIB = 1024


def framed(text: str) -> str:
    """``text`` repeated to a chunk large enough for a frame (smaller ones stay in their row)."""
    return text * (INLINE_BYTES // len(text) + 1)


def noise(size: int) -> str:
    """Output that compression saves little of."""
    return base64.b64encode(os.urandom(size * 3 // 4 + 3)).decode()[:size]


def segment_files(history_dir: Path) -> list[Path]:
    return sorted((history_dir / SEGMENTS_DIR).iterdir(), key=lambda p: int(p.stem))


def committed_lengths(history_dir: Path) -> dict[str, int]:
    with raw_db(history_dir) as conn:
        rows = conn.execute("SELECT id, file_bytes FROM output_segments").fetchall()
    return {f"{segment}.zst": int(length) for segment, length in rows}


def test_output_reads_back_exactly_across_segments(store: HistoryStore, history_dir: Path) -> None:
    pieces = [noise(60 * KIB) + "\r\n\x1b[31m✓ ünïcode 🚀\x1b[0m" for _ in range(40)]
    for piece in pieces:
        store.append_output([("h1", piece), ("h2", "x")])
    assert store.output("h1") == ("".join(pieces), True)
    assert store.output("h2") == ("x" * 40, True)  # small chunks, in their rows
    tail, cut = store.output_tail("h1", 100)
    assert cut and "".join(pieces).endswith(tail) and len(tail) >= 100
    # A session starts a new segment after SEGMENT_TEXT_BYTES of text.
    with raw_db(history_dir) as conn:
        per_handle = dict(conn.execute("SELECT handle, COUNT(*) FROM output_segments GROUP BY handle"))
    stored = sum(len(p.encode()) for p in pieces)
    assert per_handle == {"h1": -(-stored // SEGMENT_TEXT_BYTES)}
    assert {p.name: p.stat().st_size for p in segment_files(history_dir)} == committed_lengths(history_dir)


def test_a_flood_is_stored_as_it_is_and_the_rest_compressed(store: HistoryStore, history_dir: Path) -> None:
    calm = "\r\n".join(f"line {n}" for n in range(2000))  # a batch well under FLOOD_CHARS
    flood = [("h2", "y" * 16 * KIB) for _ in range(FLOOD_CHARS // (16 * KIB))]
    store.append_output([("h1", calm)])
    store.append_output(flood)
    with raw_db(history_dir) as conn:
        frames = dict(conn.execute("SELECT handle, SUM(frame_bytes) FROM output_chunks GROUP BY handle"))
    assert frames["h1"] < len(calm) // 4, "compressed"
    chunks = FLOOD_CHARS // MAX_CHUNK_CHARS
    assert frames["h2"] == FLOOD_CHARS + chunks * len(STORED), "stored as it is, a marker byte per chunk"
    assert store.output("h1") == (calm, True)
    assert store.output("h2") == ("y" * FLOOD_CHARS, True)


def test_one_large_event_is_a_flood_even_when_the_writer_keeps_up(
    store: HistoryStore, history_dir: Path
) -> None:
    # A flood's events arrive 64 KiB at a time; a writer that keeps up gets them one a batch.
    line_block = "".join(f"{n}\r\n" for n in range(6000))
    assert FLOOD_EVENT_CHARS <= len(line_block) < FLOOD_CHARS
    store.append_output([("h3", line_block)])
    store.append_output([("h4", line_block[: FLOOD_EVENT_CHARS - 1])])
    with raw_db(history_dir) as conn:
        frames = dict(conn.execute("SELECT handle, SUM(frame_bytes) FROM output_chunks GROUP BY handle"))
    assert frames["h3"] == len(line_block) + len(STORED), "stored as it is"
    assert frames["h4"] < (FLOOD_EVENT_CHARS - 1) // 2, "compressed"
    assert store.output("h3") == (line_block, True)


def test_the_output_cap_frees_whole_segments_as_the_tail_moves(history_dir: Path, clock: Clock) -> None:
    cap = 32 * SEGMENT_TEXT_BYTES // 8  # segments of an eighth of the cap: a full 1 MiB
    with HistoryStore(history_dir, clock=clock, output_cap_bytes=cap) as store:
        exec_call(store, agent_id=None, handle="h1")
        for _ in range(6 * cap // (64 * KIB)):
            store.append_output([("h1", noise(64 * KIB))])
        text, complete = store.output("h1")
        assert complete and "bytes of output cut here" in text
        assert cap <= len(text.encode()) <= cap + 200  # the marker
        # Old tail segments went as their last chunk was dropped: what is left is about the cap.
        on_disk = sum(p.stat().st_size for p in segment_files(history_dir))
        assert on_disk <= cap + 2 * SEGMENT_TEXT_BYTES

    # A smaller cap makes smaller segments: a capped command keeps about the cap on disk.
    small = 512 * KIB
    with HistoryStore(history_dir, clock=clock, output_cap_bytes=small) as store:
        exec_call(store, agent_id=None, handle="h2")
        before = {p.name for p in segment_files(history_dir)}
        for _ in range(64):
            store.append_output([("h2", noise(16 * KIB))])
        kept = [p for p in segment_files(history_dir) if p.name not in before]
        assert sum(p.stat().st_size for p in kept) <= small + small // 4 + MIN_SEGMENT_TEXT_BYTES
        assert len(segment_files(history_dir)) == count_rows(history_dir, "output_segments")


def test_the_size_limit_removes_segments_with_their_rows(history_dir: Path, clock: Clock) -> None:
    limit = 3 * 1024 * KIB
    with HistoryStore(history_dir, clock=clock, max_bytes=limit) as store:
        for n in range(12):
            exec_call(store, agent_id=None, handle=f"h{n:02d}")
            for _ in range(8):
                store.append_output([(f"h{n:02d}", noise(64 * KIB))])
            store.process_ended(f"h{n:02d}", exit_code=0, signal=None, reason="exit", ended_at=clock.now)
            clock.advance(1)
            assert store.disk_bytes() <= limit + 256 * KIB, n
        kept = {inv.session_handle for inv in store.invocations()}
        assert "h11" in kept and "h00" not in kept
        with raw_db(history_dir) as conn:
            handles = {row[0] for row in conn.execute("SELECT handle FROM output_segments")}
        assert handles == kept, "no segment outlives its session's rows"
        assert {p.name for p in segment_files(history_dir)} == set(committed_lengths(history_dir))
        assert store.output("h00") == ("", True)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
def test_another_account_cannot_read_the_segments() -> None:
    require_second_user()
    with world_tree_dir("history-segments") as tree:
        history_dir = tree / "history"
        with HistoryStore(history_dir) as store:
            store.append_output([("h1", framed("a secret printed by a command\n"))])
        (segment,) = segment_files(history_dir)
        assert stat.S_IMODE(segment.stat().st_mode) == 0o600
        # Even with the directories opened up, the file itself stays closed to others.
        os.chmod(history_dir, 0o755)
        os.chmod(history_dir / SEGMENTS_DIR, 0o755)
        done = run_as_second_user(["cat", str(segment)])
        assert done.returncode != 0 and "Permission denied" in done.stderr
        listing = run_as_second_user(["ls", str(history_dir / SEGMENTS_DIR)])
        assert listing.returncode == 0  # the opened-up directory, so the refusal above is the file's
        with HistoryStore(history_dir, recover=False) as reader:
            assert reader.output("h1") == (framed("a secret printed by a command\n"), True)


def test_a_planted_link_is_never_followed(store: HistoryStore, history_dir: Path, tmp_path: Path) -> None:
    store.append_output([("h1", framed("mine"))])
    (segment,) = segment_files(history_dir)
    target = tmp_path / "elsewhere"
    original = segment.read_bytes()
    target.write_bytes(original)
    segment.unlink()
    segment.symlink_to(target)
    assert store.output("h1") == ("", False), "a link is not read, and the output says it is incomplete"
    with pytest.raises(HistoryUnavailable, match=r"history cannot store command output: .*not a private"):
        store.append_output([("h1", framed("more"))])
    assert target.read_bytes() == original, "nothing was written through the link"
    assert store.output("h2") == ("", True)


def test_a_planted_output_directory_refuses_to_open(history_dir: Path, tmp_path: Path) -> None:
    HistoryStore(history_dir).close()
    shutil.rmtree(history_dir / SEGMENTS_DIR)
    (tmp_path / "decoy").mkdir()
    (history_dir / SEGMENTS_DIR).symlink_to(tmp_path / "decoy")
    with pytest.raises(HistoryUnavailable, match="history cannot open its output directory"):
        HistoryStore(history_dir)


def test_a_damaged_segment_reads_as_incomplete(store: HistoryStore, history_dir: Path) -> None:
    store.append_output([("h1", framed("kept\n"))])
    store.append_output([("h1", noise(SEGMENT_TEXT_BYTES))])  # fills the first segment
    # A marker with a character base64 never holds: the random noise cannot contain it.
    store.append_output([("h1", framed("lost-line\n"))])
    last = segment_files(history_dir)[-1]
    os.truncate(last, last.stat().st_size - 1)  # as a power cut could leave it
    text, complete = store.output("h1")
    assert text.startswith(framed("kept\n")) and "lost-line" not in text and not complete
    # Appending goes on in a new segment, never after the damage.
    store.append_output([("h1", framed("later\n"))])
    text, complete = store.output("h1")
    assert text.endswith(framed("later\n")) and "lost-line" not in text and not complete
    assert len(segment_files(history_dir)) == 3


def test_a_segment_removed_by_hand_reads_as_incomplete(store: HistoryStore, history_dir: Path) -> None:
    store.append_output([("h1", framed("gone\n"))])
    (segment,) = segment_files(history_dir)
    segment.unlink()
    assert store.output("h1") == ("", False)
    store.append_output([("h1", framed("new\n"))])
    assert store.output("h1") == (framed("new\n"), False)


# Runs in a child process that dies between writing a frame and committing its row.
_CRASH_SCRIPT = """
import os, sys
from pathlib import Path
from zodex_gateway.history import HistoryStore
from zodex_gateway.history import segments
store = HistoryStore(Path(sys.argv[1]))
call = store.begin(agent_id=None, tool_name="exec_command", args={}, declared_workdir=None, real_workdir=None)
store.complete(call, ok=True, result="running", session_handle="h1")
store.process_started("h1", pid=1, cmd="yes", cwd="/", started_at=1.0)
store.append_output([("h1", "before the crash\\n" * 300)])
written = segments.SegmentFiles.append
def append_then_die(self, fd, frame):
    written(self, fd, frame)
    os._exit(17)
segments.SegmentFiles.append = append_then_die
store.append_output([("h1", "written, never committed\\n" * 300)])
"""


def test_a_crash_between_segment_and_row(history_dir: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CRASH_SCRIPT, str(history_dir)], cwd=REPO, capture_output=True, timeout=60
    )
    assert child.returncode == 17, child.stderr
    (segment,) = segment_files(history_dir)
    assert segment.stat().st_size > committed_lengths(history_dir)[segment.name], "the frame was written"
    # A reader sees what was committed, the command still running.
    with HistoryStore(history_dir, recover=False) as reader:
        assert reader.output("h1") == ("before the crash\n" * 300, True)
    # The owner's next start closes the command as lost and cuts the unreferenced bytes off.
    with HistoryStore(history_dir) as owner:
        assert owner.output("h1") == ("before the crash\n" * 300, False)
        assert (owner.process("h1") or {})["output_incomplete_reason"] == OUTPUT_LOST
        assert segment.stat().st_size == committed_lengths(history_dir)[segment.name]
        owner.append_output([("h1", framed("and after\n"))])
        assert owner.output("h1")[0] == "before the crash\n" * 300 + framed("and after\n")


def test_files_no_row_names_are_removed_by_the_owner(history_dir: Path) -> None:
    HistoryStore(history_dir).close()
    stray = history_dir / SEGMENTS_DIR / "99.zst"
    stray.write_bytes(b"left by a crash before its segment row was committed")
    with HistoryStore(history_dir, recover=False):
        assert stray.exists(), "a reader changes nothing"
    with HistoryStore(history_dir) as owner:
        assert not stray.exists() and owner.disk_bytes() > 0


# Runs inside a private mount namespace over a small tmpfs: the mount ends with the process.
_FULL_DISK_SCRIPT = """
import base64, json, os, sqlite3, sys
from pathlib import Path
from zodex_gateway.history import HistoryStore, HistoryUnavailable, clear_history
directory = Path(sys.argv[1]) / "history"
report = {"stored": 0}
with HistoryStore(directory) as store:
    call = store.begin(agent_id=None, tool_name="exec_command", args={}, declared_workdir=None, real_workdir=None)
    store.process_started("h1", pid=1, cmd="yes", cwd="/", started_at=1.0)
    expected = ""
    while True:
        piece = base64.b64encode(os.urandom(48 * 1024)).decode()
        try:
            store.append_output([("h1", piece)])
        except HistoryUnavailable as exc:
            report["refused"] = str(exc)
            break
        expected += piece
    text, complete = store.output("h1")
    report["intact"] = text == expected and complete
    report["stored"] = len(expected)
    store.mark_output_incomplete("h1", "output events were not stored: history could not write")
    store.complete(call, ok=True, result="done", session_handle="h1")
    store.process_ended("h1", exit_code=0, signal=None, reason="exit", ended_at=2.0)
    with sqlite3.connect(directory / "history.sqlite3") as conn:
        lengths = dict(conn.execute("SELECT id || '.zst', file_bytes FROM output_segments"))
    report["lengths_match"] = lengths == {p.name: p.stat().st_size for p in (directory / "output").iterdir()}
with HistoryStore(directory) as reopened:
    report["status"] = reopened.invocations()[0].status
    report["after"] = reopened.output("h1")[0] == expected
    report["process"] = reopened.process("h1")
print(json.dumps(report))
"""


def test_a_full_disk_while_writing_output_corrupts_nothing() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("mounting a tmpfs needs root and unshare(1)")
    with tempfile.TemporaryDirectory(prefix="zodex-full-") as target:
        script = (
            f'mount -t tmpfs -o size=3m,mode=0700 zodexhistory "$1" && exec "{sys.executable}" -c "$2" "$1"'
        )
        child = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
                target,
                _FULL_DISK_SCRIPT,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert child.returncode == 0, child.stderr
        assert os.listdir(target) == [], "the tmpfs ended with its namespace"
    report = json.loads(child.stdout)
    assert report["refused"].startswith("history cannot store command output: ")
    assert report["refused"].endswith((os.strerror(28), "database or disk is full"))
    assert report["stored"] > 256 * KIB, "output was stored until the disk was full"
    assert report["intact"] and report["after"], "what was stored reads back exactly"
    assert report["lengths_match"], "a failed append was cut off its segment"
    assert report["status"] == "ok"
    process = report["process"]
    assert process["ended_at"] == 2.0 and process["output_complete"] is False
    assert process["output_incomplete_reason"] == "output events were not stored: history could not write"


def test_clear_removes_the_segments(history_dir: Path) -> None:
    with HistoryStore(history_dir) as store:
        store.append_output([("h1", framed("x")), ("h2", framed("y"))])
    assert clear_history(history_dir) == 3  # the database (its WAL went at close), two segments
    assert not (history_dir / SEGMENTS_DIR).exists()
    with HistoryStore(history_dir) as store:
        assert store.output("h1") == ("", True)
