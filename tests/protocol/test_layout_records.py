"""Registry records are read as untrusted input (in Sprite another account writes them):
no links, a size bound, every field typed, and endpoints only inside the runtime."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from zodex_protocol.layout import MAX_RECORD_BYTES, RuntimeLayout, WorkerRecord


def _record(layout: RuntimeLayout, **changes: object) -> dict[str, object]:
    record = WorkerRecord(
        worker_id="abcdefg",
        incarnation=3,
        pid=1234,
        pid_start=99,
        workdir="/tmp",
        request_endpoint=layout.request_endpoint("abcdefg", 3),
        event_endpoint=layout.event_endpoint("abcdefg", 3),
        protocol=1,
    )
    return {**asdict(record), **changes}


def test_a_good_record_reads_back(tmp_path: Path) -> None:
    layout = RuntimeLayout(tmp_path)
    layout.create()
    layout.record_file("abcdefg").write_text(json.dumps(_record(layout)))
    record = layout.read_record("abcdefg")
    assert record is not None and record.pid == 1234
    WorkerRecord(**_record(layout)).write(layout.started_file("abcdefg", 3))  # type: ignore[arg-type]
    assert layout.read_record("abcdefg", 3) == record
    assert layout.read_record("abcdefg", 4) is None


def test_records_that_are_not_records_are_refused(tmp_path: Path) -> None:
    layout = RuntimeLayout(tmp_path)
    layout.create()
    path = layout.record_file("abcdefg")
    bad = [
        _record(layout, pid="1234"),
        _record(layout, pid=True),
        _record(layout, pid=0),
        _record(layout, incarnation=None),
        {**_record(layout), "extra": 1},
        [1, 2],
    ]
    for data in bad:
        path.write_text(json.dumps(data))
        assert WorkerRecord.read(path) is None, data
    path.write_text(" " * (MAX_RECORD_BYTES + 1) + json.dumps(_record(layout)))
    assert WorkerRecord.read(path) is None


def test_links_and_foreign_endpoints_are_refused(tmp_path: Path) -> None:
    layout = RuntimeLayout(tmp_path / "rt")
    layout.create()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_record(layout)))
    layout.record_file("abcdefg").symlink_to(elsewhere)
    assert layout.read_record("abcdefg") is None
    layout.record_file("abcdefg").unlink()
    for changes in (
        {"request_endpoint": "ipc:///run/other/socket"},
        {"event_endpoint": "tcp://10.0.0.1:5555"},
        {"worker_id": "zzzzzzz"},
    ):
        layout.record_file("abcdefg").write_text(json.dumps(_record(layout, **changes)))
        assert layout.read_record("abcdefg") is None, changes


def test_writing_a_record_never_follows_a_planted_link(tmp_path: Path) -> None:
    layout = RuntimeLayout(tmp_path)
    layout.create()
    target = tmp_path / "victim"
    target.write_text("keep")
    record = WorkerRecord(**_record(layout))  # type: ignore[arg-type]
    record.write(layout.record_file("abcdefg"))
    assert target.read_text() == "keep"
    assert sorted(p.name for p in layout.workers_dir.iterdir()) == ["abcdefg.json"]


def test_publishing_writes_the_started_and_the_latest_record_and_leaves_nothing_else(tmp_path: Path) -> None:
    layout = RuntimeLayout(tmp_path / "rt")
    layout.create()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    layout.record_file("abcdefg").symlink_to(victim)  # planted where the latest record goes
    third = WorkerRecord(**_record(layout))  # type: ignore[arg-type]
    third.publish(layout)
    fourth = WorkerRecord(
        **_record(  # type: ignore[arg-type]
            layout,
            incarnation=4,
            pid=4321,
            request_endpoint=layout.request_endpoint("abcdefg", 4),
            event_endpoint=layout.event_endpoint("abcdefg", 4),
        )
    )
    fourth.publish(layout)
    assert victim.read_text() == "keep"
    assert layout.read_record("abcdefg", 3) == third, "the third incarnation's started record stays"
    assert layout.read_record("abcdefg", 4) == layout.read_record("abcdefg") == fourth
    names = sorted(p.name for p in layout.workers_dir.iterdir())
    assert names == sorted(
        ["abcdefg.json", layout.started_file("abcdefg", 3).name, layout.started_file("abcdefg", 4).name]
    )
