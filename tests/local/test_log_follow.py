"""Following a log (`zodex local logs --follow`): the end, then each new line as it is
written, across the log being rotated or recreated — woken by inotify, not a timer."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from zodex_gateway.local.lifecycle import LocalError
from zodex_gateway.local.log_follow import follow

pytestmark = pytest.mark.timeout(30)


class Followed:
    def __init__(self) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.error: list[BaseException] = []

    def next(self, timeout: float = 5.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout}s; error: {self.error}") from None

    def none_pending(self) -> bool:
        return self.lines.empty()


@contextmanager
def following(path: Path, lines: int = 10) -> Iterator[Followed]:
    followed = Followed()
    stop_r, stop_w = os.pipe()

    def run() -> None:
        try:
            follow(path, lines, followed.lines.put, stop_fd=stop_r)
        except BaseException as exc:
            followed.error.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield followed
    finally:
        os.write(stop_w, b"x")
        thread.join(10)
        os.close(stop_r)
        os.close(stop_w)
    assert not thread.is_alive(), "follow ends when asked"
    assert not followed.error, followed.error


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_prints_the_end_then_new_lines_as_written(tmp_path: Path) -> None:
    log = tmp_path / "runtime.log"
    log.write_text("".join(f"old {i}\n" for i in range(20)))
    with following(log, lines=3) as followed:
        assert [followed.next() for _ in range(3)] == ["old 17", "old 18", "old 19"]
        append(log, "new one\n")
        assert followed.next() == "new one"
        append(log, "half ")  # an unfinished line waits for its end
        append(log, "and the rest\nsecond\n")
        assert followed.next() == "half and the rest"
        assert followed.next() == "second"
        assert followed.none_pending()


def test_survives_rotation_and_recreation(tmp_path: Path) -> None:
    log = tmp_path / "runtime.log"
    log.write_text("first\n")
    with following(log) as followed:
        assert followed.next() == "first"
        # As RotatingFileHandler does: a last line, rename, a new file.
        append(log, "last of the old file\n")
        log.rename(tmp_path / "runtime.log.1")
        append(log, "in the new file\n")
        assert followed.next() == "last of the old file"
        assert followed.next() == "in the new file"
        # Removed, then made again (the state directory cleaned by hand, a new start).
        log.unlink()
        append(log, "recreated\n")
        assert followed.next() == "recreated"
        append(log, "still following\n")
        assert followed.next() == "still following"


def test_waits_for_a_log_that_does_not_exist_yet(tmp_path: Path) -> None:
    log = tmp_path / "runtime.log"
    with following(log) as followed:
        append(log, "the runtime started\n")
        assert followed.next() == "the runtime started"


def test_a_missing_log_directory_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LocalError, match=r"cannot follow .*runtime.log: No such file or directory"):
        follow(tmp_path / "absent" / "runtime.log", 10, lambda _line: None)


def test_a_directory_gone_while_the_event_queue_overflowed_is_noticed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When inotify's queue overflows, the events it dropped may include the directory's own
    end: the follower looks for itself instead of following a directory that is gone."""
    from zodex_system import inotify

    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "runtime.log"
    log.write_text("one\n")
    real_read = inotify.Inotify.read

    def overflowed(self: inotify.Inotify) -> list[inotify.Event]:
        real_read(self)  # whatever the kernel kept is lost, as in an overflow
        return [inotify.Event(-1, inotify.IN_Q_OVERFLOW, "")]

    monkeypatch.setattr(inotify.Inotify, "read", overflowed)
    stop_r, stop_w = os.pipe()
    errors: list[BaseException] = []
    seen: queue.Queue[str] = queue.Queue()
    thread = threading.Thread(target=lambda: _follow_into(log, stop_r, errors, seen.put))
    thread.start()
    try:
        assert seen.get(timeout=10) == "one", "following: the watch is in place"
        log.unlink()
        logs.rmdir()
        thread.join(20)
    finally:
        os.write(stop_w, b"x")
        thread.join(10)
        os.close(stop_r)
        os.close(stop_w)
    assert [str(e) for e in errors] == [f"stopped following: {logs} was removed or moved"]


def _follow_into(log: Path, stop_fd: int, errors: list[BaseException], emit: Callable[[str], None]) -> None:
    try:
        follow(log, 10, emit, stop_fd=stop_fd)
    except BaseException as exc:
        errors.append(exc)
