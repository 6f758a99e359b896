"""Property: a session's output does not depend on how the byte stream is cut into reads."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.system.test_terminal_text_properties import clean, streams
from zodex_worker.output.stream import SessionOutput


@settings(max_examples=200, deadline=None)
@given(text=streams, points=st.lists(st.integers(min_value=0), max_size=12))
def test_session_output_is_independent_of_byte_chunking(text: str, points: list[int]) -> None:
    data = text.encode() + b"\xff\xc3"  # end on invalid and cut bytes

    def run(pieces: list[bytes]) -> tuple[str, str]:
        # Far below the inline limit, so no spill file is ever made (nor could be, here).
        out = SessionOutput(spill_dir=Path(__file__) / "no-spill", spill_name="x")
        raw = "".join(out.feed(piece) for piece in pieces) + out.finish()
        return raw, out.take_delta()

    edges = [0, *sorted(p % (len(data) + 1) for p in points), len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(edges)]
    whole_raw, whole_clean = run([data])
    assert run(pieces) == (whole_raw, whole_clean)
    assert whole_raw == data.decode("utf-8", "replace")
    assert whole_clean == clean([whole_raw])
