"""docs/output.md end to end: cleaning, deltas, tail previews and spill files from real PTYs."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from tests.support.gate import Gate
from tests.support.gateway import GatewayEnv, gateway_env, stdio_gateway

pytestmark = pytest.mark.timeout(120)


async def test_cleaning(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    script = (
        r"printf '\033[1;31mred\033[0m plain\n'; "
        r"printf '\033]0;title\007osc gone\n'; "
        r"printf '\033(Bcharset\033[?25l\n'; "
        r"printf 'progress 10%%\rprogress 50%%\rprogress 100%%\n'; "
        r"printf 'a\tb\n'; "
        r"printf 'bell\a nul\001 bidi\342\200\256x\n'; "
        r"printf 'bad \377\376 bytes\n'"
    )
    async with connect(genv) as mcp:
        r = await mcp.exec(script, str(tmp_path))
    assert r["output"] == (
        "red plain\nosc gone\ncharset\nprogress 100%\na\tb\nbell nul bidix\nbad \ufffd\ufffd bytes\n"
    )


async def test_utf8_split_across_reads(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    # Each byte of a 4-byte character arrives in its own write, with pauses between.
    script = r"""for b in '\360' '\237' '\230' '\200'; do printf "$b"; sleep 0.05; done; printf ' é\n'"""
    async with connect(genv) as mcp:
        r = await mcp.exec(script, str(tmp_path))
    assert r["output"] == "\U0001f600 é\n"


async def test_large_delta_gives_head_and_tail_preview_and_spill_file(tmp_path: Path) -> None:
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec("seq 1 20000", str(tmp_path))
        spill_dir = genv.spill_dir
        content = Path(r["output_file"]).read_text()
        modes = (Path(r["output_file"]).stat().st_mode, spill_dir.stat().st_mode)
    whole = "".join(f"{i}\n" for i in range(1, 20001))
    head, rest = r["output"].split("\n[zodex] … ", 1)
    marker, tail = rest.split("\n", 1)
    assert whole.startswith(head + "\n") and len(head) < 1000  # whole lines, a quarter of 4000
    assert whole.endswith(tail) and tail.startswith(str(20001 - tail.count("\n"))) and len(tail) <= 3000
    omitted = whole.count("\n") - head.count("\n") - 1 - tail.count("\n")
    assert (
        marker
        == f"{omitted:,} lines, {(len(whole) - len(head) - 1 - len(tail)) / 1000:.1f} kB omitted; the whole output is in {r['output_file']}"
    )
    assert r["output_chars"] == len(whole)
    assert r["output_lines"] == 20000
    assert r["output_file_truncated"] is False
    path = Path(r["output_file"])
    assert path.is_absolute() and path.parent == spill_dir
    assert content == whole
    assert stat.S_IMODE(modes[0]) == 0o600
    assert stat.S_IMODE(modes[1]) == 0o700


async def test_spill_fields_stay_on_every_later_result(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    gate = Gate.make(tmp_path)
    async with connect(genv) as mcp:
        r = await mcp.exec(f"seq 1 5000; {gate.wait}; echo tail-line", str(tmp_path), yield_time_ms=1000)
        assert "output_file" in r
        await gate.release()
        rest, last = await mcp.drain(r["session_handle"])
    assert "tail-line" in rest
    assert last["output_chars"] == len("".join(f"{i}\n" for i in range(1, 5001))) + len("tail-line\n")
    assert Path(last["output_file"]).read_text().endswith("5000\ntail-line\n")


async def test_small_output_has_no_spill_file(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec("seq 1 100", str(tmp_path))
    assert "output_file" not in r and "output_chars" not in r
    assert not genv.spill_dir.exists() or list(genv.spill_dir.iterdir()) == []


async def test_spill_cap_truncates_file_not_counts(tmp_path: Path) -> None:
    with gateway_env(spill_file_cap_bytes=50_000) as genv:
        async with stdio_gateway(genv) as mcp:
            r = await mcp.exec("seq 1 100000", str(tmp_path))
        content = Path(r["output_file"]).read_text()
    whole = "".join(f"{i}\n" for i in range(1, 100001))
    assert r["output_file_truncated"] is True
    assert r["output_chars"] == len(whole)
    assert r["output_lines"] == 100000
    assert content == whole[:50_000]
    assert r["output"].startswith("1\n2\n") and r["output"].endswith(whole[-2000:])
    assert f"; the first 50000 bytes of the output is in {r['output_file']}\n" in r["output"]


async def test_old_spill_files_are_removed_at_worker_start(tmp_path: Path) -> None:
    with gateway_env() as genv:
        genv.spill_dir.mkdir(parents=True, mode=0o700)
        old = genv.spill_dir / "old.log"
        fresh = genv.spill_dir / "fresh.log"
        for f in (old, fresh):
            f.write_text("x")
        day_ago = time.time() - 25 * 3600
        os.utime(old, (day_ago, day_ago))
        async with stdio_gateway(genv) as mcp:
            await mcp.exec("true", str(tmp_path))
        assert not old.exists()
        assert fresh.exists()


async def test_memory_stays_bounded_for_a_big_stream(tmp_path: Path) -> None:
    """100 MB through one session: the worker's RSS must not grow with the volume."""
    import psutil

    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            await mcp.exec("true", str(tmp_path))
            from zodex_protocol.layout import WorkerRecord

            record = next(
                r
                for d in genv.runtime_dirs()
                for p in (d / "w").glob("*.json")
                if (r := WorkerRecord.read(p))
            )
            before = psutil.Process(record.pid).memory_info().rss
            r = await mcp.exec(
                "head -c 100000000 /dev/zero | tr '\\0' 'x' | fold -w 100", str(tmp_path), yield_time_ms=60000
            )
            if r["status"] == "running":
                _, r = await mcp.drain(r["session_handle"], limit_s=100)
            after = psutil.Process(record.pid).memory_info().rss
    assert r["output_chars"] == 100_000_000 + 999_999  # fold adds no newline after the last line
    assert after - before < 20 * 1024 * 1024, f"worker grew by {(after - before) / 1e6:.1f} MB"
