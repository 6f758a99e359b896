"""A spill file that the disk cuts short, or that cannot be made, says why
(docs/output.md#spill-files)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from zodex_worker.output.spill import SpillFile
from zodex_worker.output.stream import SessionOutput

ENOSPC = os.strerror(errno.ENOSPC)


def spill_fields(out: SessionOutput) -> dict[str, Any] | None:
    """The spill fields of a result, as the wire carries them."""
    spilled = out.spilled()
    return None if spilled is None else spilled.fields()


def flood(out: SessionOutput, chars: int = 300) -> None:
    out.feed(("y" * 99 + "\n").encode() * (chars // 100))


def test_a_write_error_is_kept_as_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spill = SpillFile(tmp_path / "s.log")
    spill.write("kept\n")

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, ENOSPC)

    monkeypatch.setattr(os, "write", full)
    spill.write("lost\n")
    monkeypatch.undo()
    spill.close()
    assert spill.truncated and spill.error == ENOSPC
    assert (tmp_path / "s.log").read_text() == "kept\n"


def test_the_cap_alone_gives_no_error(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "s.log", cap_bytes=3)
    spill.write("abcdef")
    spill.close()
    assert spill.truncated and spill.error is None


def test_a_spill_cut_short_reports_the_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = SessionOutput(spill_dir=tmp_path, spill_name="h", inline_limit=100, preview_chars=50)
    real_write = os.write
    budget = [150]  # bytes the "disk" still takes

    def filling(fd: int, data: bytes | memoryview) -> int:
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, ENOSPC)
        done = real_write(fd, bytes(data)[: budget[0]])
        budget[0] -= done
        return done

    monkeypatch.setattr(os, "write", filling)
    flood(out)
    monkeypatch.undo()
    fields = spill_fields(out)
    assert fields is not None
    assert fields["output_file_truncated"] is True and fields["output_file_error"] == ENOSPC
    assert fields["output_chars"] == 300
    delta = out.take_delta()
    assert f"the whole output is in {fields['output_file']}, cut short ({ENOSPC})\n" in delta
    out.close()
    assert os.path.getsize(str(fields["output_file"])) == 150


def test_a_spill_file_that_cannot_be_made_reports_why(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    out = SessionOutput(spill_dir=blocker / "spill", spill_name="h", inline_limit=100, preview_chars=50)
    flood(out)
    reason = os.strerror(errno.ENOTDIR)
    assert spill_fields(out) == {"output_chars": 300, "output_lines": 3, "output_file_error": reason}
    assert f"; the whole output was not saved ({reason})\n" in out.take_delta()
    out.close()


def test_a_healthy_spill_has_no_error_field(tmp_path: Path) -> None:
    out = SessionOutput(spill_dir=tmp_path, spill_name="h", inline_limit=100, preview_chars=50)
    flood(out)
    fields = spill_fields(out)
    assert fields is not None and "output_file_error" not in fields
    assert fields["output_file_truncated"] is False
    out.close()
