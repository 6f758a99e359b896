"""History stays within its size limit while a real Local runtime records a flood of output
(docs/history.md#retention), scaled down through config: a 1 MiB limit, a 256 KiB cap."""

from __future__ import annotations

import base64
import random
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import wait_for
from tests.support.local import LocalEnv, connected, local_env
from zodex_gateway.history import DB_NAME, HistoryStore
from zodex_gateway.history.records import OUTPUT_TRIMMED
from zodex_gateway.history.storage import SEGMENTS_DIR

pytestmark = pytest.mark.timeout(120)

LIMIT = 1024 * 1024
CAP = 256 * 1024
BATCH = 256 * 1024  # the capture's batch: the most history may overshoot by


def history_dir(local: LocalEnv) -> Path:
    return local.root / "state" / "zodex" / "local" / "history"


def on_disk(directory: Path) -> int:
    total = 0
    for path in [
        directory / DB_NAME,
        directory / f"{DB_NAME}-wal",
        *(directory / SEGMENTS_DIR).glob("*.zst"),
    ]:
        total += path.stat().st_size if path.exists() else 0
    return total


def noise(seed: int, lines: int) -> tuple[str, str]:
    """A command printing ``lines`` lines of 80 characters that compression saves little of
    (history compresses output: `seq` would take a twelfth), and what its PTY shows."""
    make = f"base64.b64encode(r.randbytes(60)).decode() for _ in range({lines})"
    program = f"import base64, random; r = random.Random({seed}); print(chr(10).join({make}))"
    r = random.Random(seed)
    shown = "".join(base64.b64encode(r.randbytes(60)).decode() + "\r\n" for _ in range(lines))
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(program)}", shown


async def test_a_flood_of_output_stays_within_the_limit(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "config", "set", "history.max-size", "1mb")
        local.run("local", "config", "set", "output.spill-cap", "256kb")
        local.run("local", "start", str(tmp_path))
        directory = history_dir(local)
        handles: list[str] = []
        async with connected(local) as mcp:
            for n in range(8):
                # 1 MB per command: 8 MB in all, 8 times the limit.
                cmd, stream = noise(n, 12_500)
                result: dict[str, Any] = await mcp.exec(cmd, str(tmp_path), yield_time_ms=30000)
                assert result["status"] == "exited", result["summary"]
                with HistoryStore(directory, recover=False) as store:
                    [latest] = store.invocations(last=1)
                    handle = latest.session_handle or ""
                    await wait_for(
                        lambda store=store, handle=handle: (
                            (store.process(handle) or {}).get("ended_at") is not None
                        ),
                        what="the command's end to be recorded",
                    )
                handles.append(handle)
                assert on_disk(directory) <= LIMIT + BATCH, f"after command {n}: {on_disk(directory)} bytes"

        with HistoryStore(directory, recover=False) as store:
            kept = [inv.session_handle for inv in store.invocations()]
            assert kept == handles[-len(kept) :], "only the oldest calls are removed"
            assert 2 <= len(kept) <= 4, kept
            text, complete = store.output(handles[-1])
            cut = (store.process(handles[-1]) or {})["output_cut"]
        assert cut == len(stream) - CAP
        head, rest = text.split("\n[zodex: ", 1)
        assert head == stream[: CAP // 4]
        assert rest.startswith(f"{cut:,} bytes of output cut here; ")
        assert rest.endswith(stream[-(CAP - CAP // 4) :])
        assert complete


async def test_a_command_flooding_after_its_calls_were_trimmed_keeps_the_limit(tmp_path: Path) -> None:
    with local_env() as local:
        local.run("local", "config", "set", "history.max-size", "1mb")
        local.run("local", "config", "set", "output.spill-cap", "4mb")  # one command could fill 4 limits
        local.run("local", "start", str(tmp_path))
        directory = history_dir(local)
        go = tmp_path / "go"
        # 1.2 MB at once, then 4.5 MB more once the test says so.
        first, _ = noise(1, 15_000)
        then, _ = noise(2, 55_000)
        flood = f"{first}; while [ ! -e {go} ]; do sleep 0.05; done; {then}"
        async with connected(local) as mcp:
            started = await mcp.exec(flood, str(tmp_path), yield_time_ms=200)
            handle = started["session_handle"]

            def trimmed() -> bool:
                with HistoryStore(directory, recover=False) as store:
                    return all(inv.session_handle != handle for inv in store.invocations())

            # The model goes on with other calls: the flood's exec call, the oldest, is trimmed.
            n = 0
            while not trimmed():
                assert n < 50, "the running command's call was never trimmed"
                await mcp.exec(f"echo {n}", str(tmp_path))
                n += 1
            go.touch()

            def ended() -> bool:
                with HistoryStore(directory, recover=False) as store:
                    return (store.process(handle) or {}).get("ended_at") is not None

            await wait_for(ended, what="the flood's end to be recorded", timeout=60)
        assert on_disk(directory) <= LIMIT + BATCH, f"{on_disk(directory)} bytes on disk"
        with HistoryStore(directory, recover=False) as store:
            assert (store.process(handle) or {})["output_incomplete_reason"] == OUTPUT_TRIMMED
        log = (local.root / "state" / "zodex" / "local" / "logs" / "runtime.log").read_text()
        assert log.count("holds only its newest and pending calls") <= 1
