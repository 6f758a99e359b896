"""docs/tools.md#waiting-for-output and docs/sessions.md#yields end to end: wait_for through a
real MCP client, gateway, worker and PTY, on stdio and HTTP."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.support.gateway import GatewayEnv, gateway_env, stdio_gateway, wait_for
from tests.support.slowdown import scaled

pytestmark = pytest.mark.timeout(180)

PROMPT = """python3 -c 'input("name? "); print("hello")'"""


async def test_a_prompt_matches_well_under_the_yield(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        started = time.monotonic()
        r = await mcp.exec(PROMPT, str(tmp_path), wait_for=r"name\? $", yield_time_ms=30_000)
        elapsed = time.monotonic() - started
        assert (r["status"], r["wait"], r["matched_text"]) == ("running", "matched", "name? ")
        assert r["output"] == "name? "
        assert elapsed < scaled(10), f"a prompt took {elapsed:.1f}s against a 30 s yield"
        # After typing, the prompt typed at is not new output: only the answer is matched.
        answered = await mcp.write(r["session_handle"], chars="bob\n", wait_for=r"name|hello")
    assert (answered["wait"], answered["matched_text"]) == ("matched", "hello")
    # The match may come before print's line end reaches the PTY: "hello" is the answer's end.
    assert "name?" not in answered["output"] and answered["output"].rstrip("\r\n").endswith("hello")


@pytest.mark.parametrize(
    ("first", "second", "pattern", "matched"),
    [
        # Within a line: the pending line is matched whole at each check.
        ("Listen", "ing on 8000\\n", "Listening on [0-9]+", "Listening on 8000"),
        # Across a line end: the first line was committed at the first check; the overlap keeps it.
        ("Compiling 3 files\\n", "Done\\n", "files\nDone", "files\nDone"),
    ],
    ids=["within-a-line", "across-lines"],
)
async def test_a_match_split_across_reads_is_found(
    genv: GatewayEnv, connect, tmp_path: Path, first: str, second: str, pattern: str, matched: str
) -> None:
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    cmd = f"printf '{first}'; touch printed; read _ < go; printf '{second}'; sleep 60"
    async with connect(genv) as mcp:
        call = asyncio.create_task(mcp.exec(cmd, str(tmp_path), wait_for=pattern, yield_time_ms=30_000))
        # The command goes on only once the FIFO is written: "Listen" is in the PTY alone. A
        # call answered by the same worker afterwards means its loop has read it and checked
        # the pattern on it, alone.
        await wait_for((tmp_path / "printed").exists, what="the command to print 'Listen'")
        other = await mcp.exec("echo other", str(tmp_path))
        assert other["output"] == "other\n"
        assert not call.done(), call.result()
        await asyncio.to_thread(fifo.write_text, "go\n")
        r = await call
        await mcp.write(r["session_handle"], kill_process=True)
    assert (r["wait"], r["matched_text"]) == ("matched", matched)
    assert r["output"] == (first + second).replace("\\n", "\n")


async def test_exited_and_yield_are_told_apart(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        ended = await mcp.exec("echo done", str(tmp_path), wait_for="never", yield_time_ms=20_000)
        started = time.monotonic()
        running = await mcp.exec("echo started; sleep 60", str(tmp_path), wait_for="never", yield_time_ms=700)
        exec_wait = time.monotonic() - started
        handle = running["session_handle"]
        # A poll with wait_for does not return when the output goes quiet, only at the yield.
        started = time.monotonic()
        polled = await mcp.write(handle, wait_for="never", yield_time_ms=1_000)
        poll_wait = time.monotonic() - started
        killed = await mcp.write(handle, kill_process=True, wait_for="never")
        tombstone = await mcp.write(handle, wait_for="never")
        plain = await mcp.write(handle)
    assert (ended["status"], ended["wait"], ended["output"]) == ("exited", "exited", "done\n")
    assert "matched_text" not in ended
    assert (running["status"], running["wait"], running["output"]) == ("running", "yield", "started\n")
    assert (polled["status"], polled["wait"], polled["output"]) == ("running", "yield", "")
    assert exec_wait >= 0.7 and poll_wait >= 1.0
    assert (killed["wait"], killed["termination_reason"]) == ("exited", "killed")
    assert (tombstone["status"], tombstone["wait"]) == ("exited", "exited")
    assert "wait" not in plain


async def test_only_output_no_result_carried_is_matched(genv: GatewayEnv, connect, tmp_path: Path) -> None:
    async with connect(genv) as mcp:
        r = await mcp.exec("echo 'BUILD SUCCESSFUL'; sleep 60", str(tmp_path), yield_time_ms=50)
        handle = r["session_handle"]
        if "BUILD" in r["output"]:  # carried already: it is not new to the next call
            found = r
        else:
            found = await mcp.write(handle, wait_for="BUILD (SUCCESSFUL|FAILED)", yield_time_ms=20_000)
            assert (found["wait"], found["matched_text"]) == ("matched", "BUILD SUCCESSFUL")
        again = await mcp.write(handle, wait_for="BUILD", yield_time_ms=500)
        await mcp.write(handle, kill_process=True)
    assert found["output"] == "BUILD SUCCESSFUL\n"
    assert (again["wait"], again["output"]) == ("yield", "")


async def test_a_refused_pattern_names_the_field_and_position(
    genv: GatewayEnv, connect, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    async with connect(genv) as mcp:
        unbalanced = await mcp.error(
            "exec_command", cmd=f"touch {marker}", workdir=str(tmp_path), wait_for="("
        )
        late = await mcp.error("exec_command", cmd=f"touch {marker}", workdir=str(tmp_path), wait_for="ab(c")
        lookahead = await mcp.error(
            "exec_command", cmd=f"touch {marker}", workdir=str(tmp_path), wait_for="x(?=y)"
        )
        too_long = await mcp.error(
            "exec_command", cmd=f"touch {marker}", workdir=str(tmp_path), wait_for="a" * 1001
        )
        not_text = await mcp.error("exec_command", cmd=f"touch {marker}", workdir=str(tmp_path), wait_for=5)
        r = await mcp.exec("cat", str(tmp_path), yield_time_ms=50)
        typed = await mcp.error("write_stdin", session_handle=r["session_handle"], chars="hi\n", wait_for="[")
        after = await mcp.write(r["session_handle"], yield_time_ms=300)
        await mcp.write(r["session_handle"], kill_process=True)
        longest = await mcp.exec("echo ok", str(tmp_path), wait_for="a" * 1000)
    assert (
        unbalanced
        == "wait_for is not a valid regular expression at position 0: missing ), unterminated subpattern"
    )
    assert (
        late == "wait_for is not a valid regular expression at position 2: missing ), unterminated subpattern"
    )
    assert lookahead.startswith("wait_for is not supported at position 1: invalid perl operator (?= (")
    assert too_long == "wait_for is too long (1001 characters; the limit is 1000)"
    assert not_text == "wait_for must be a string"
    assert typed.startswith("wait_for is not a valid regular expression at position 0: ")
    assert after["output"] == ""  # the refused call typed nothing
    assert longest["wait"] == "exited"
    assert not marker.exists()


async def test_a_pathological_pattern_cannot_stall_the_worker(
    genv: GatewayEnv, connect, tmp_path: Path
) -> None:
    """(a+)+b against 100 KB of a's takes a backtracking engine exponential time; RE2 reads
    it once. While the call waits, another session of the same workdir answers at once."""
    flood = (
        'python3 -c \'import pathlib, sys, time; sys.stdout.write("a" * 100_000); sys.stdout.flush(); '
        'pathlib.Path("printed").touch(); time.sleep(60)\''
    )
    async with connect(genv) as mcp:
        await mcp.exec("true", str(tmp_path))  # the worker is up
        started = time.monotonic()
        yield_ms = min(30_000, int(scaled(4_000)))
        call = asyncio.create_task(mcp.exec(flood, str(tmp_path), wait_for="(a+)+b", yield_time_ms=yield_ms))
        # A PTY holds far less than 100 KB: once the write returned, the worker has read the a's.
        await wait_for((tmp_path / "printed").exists, what="the a's to be printed")
        answers = []
        for _ in range(5):
            asked = time.monotonic()
            r = await mcp.exec("echo alive", str(tmp_path))
            answers.append(time.monotonic() - asked)
            assert r["output"] == "alive\n"
        assert not call.done()
        r = await call
        elapsed = time.monotonic() - started
        await mcp.write(r["session_handle"], kill_process=True)
    assert (r["wait"], r["status"]) == ("yield", "running")
    assert r["output_chars"] == 100_000
    assert elapsed < yield_ms / 1000 + scaled(6)
    assert max(answers) < scaled(2), answers


async def test_a_60s_yield_is_clamped_to_30s_and_a_configured_ceiling_holds(tmp_path: Path) -> None:
    async def waited(env: GatewayEnv) -> tuple[float, dict[str, object]]:
        async with stdio_gateway(env) as mcp:
            await mcp.exec("true", str(tmp_path))
            started = time.monotonic()
            r = await mcp.exec("sleep 90", str(tmp_path), yield_time_ms=60_000)
            elapsed = time.monotonic() - started
            await mcp.write(str(r["session_handle"]), kill_process=True)
            return elapsed, r

    with gateway_env() as default, gateway_env(yield_max_ms=33_000) as raised:
        (short, r1), (longer, r2) = await asyncio.gather(waited(default), waited(raised))
    assert r1["status"] == r2["status"] == "running"
    assert 30 <= short < 30 + scaled(5), short
    assert 33 <= longer < 33 + scaled(5), longer


async def test_seq_two_million_gives_head_and_tail_previews(tmp_path: Path) -> None:
    import re

    marker = re.compile(
        r"^\[zodex\] … ([\d,]+) lines?, (?:[\d.]+ (?:kB|MB|GB)|\d+ bytes?) omitted; "
        r"the whole output is in (\S+)$",
        re.MULTILINE,
    )
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            results = [await mcp.exec("seq 1 2000000", str(tmp_path), yield_time_ms=30_000)]
            while results[-1]["status"] == "running":
                results.append(await mcp.write(results[-1]["session_handle"], yield_time_ms=30_000))
        last = results[-1]
        whole = Path(last["output_file"]).read_text()
    assert whole == "".join(f"{i}\n" for i in range(1, 2_000_001))
    assert last["output_lines"] == 2_000_000 and last["output_chars"] == len(whole)
    first = results[0]["output"]
    assert first.startswith("1\n2\n3\n")
    assert last["output"].endswith("1999999\n2000000\n")
    counted = 0
    for r in results:
        found = marker.search(r["output"])
        if found is None:
            assert len(r["output"]) <= 16_000
            counted += r["output"].count("\n")
            continue
        assert found.group(2) == last["output_file"]
        shown = r["output"].replace(found.group(0) + "\n", "")
        assert len(shown) <= 4_000
        counted += shown.count("\n") + int(found.group(1).replace(",", ""))
    assert counted == 2_000_000


async def test_a_long_first_and_last_line_are_cut_to_their_budgets(
    genv: GatewayEnv, connect, tmp_path: Path
) -> None:
    cmd = 'python3 -c \'print("E" * 5000); [print(i) for i in range(3000)]; print("T" * 5000, end="")\''
    async with connect(genv) as mcp:
        r = await mcp.exec(cmd, str(tmp_path))
    head, marker_line, tail = r["output"].split("\n", 1)[0], *r["output"].split("\n", 1)[1].split("\n", 1)
    assert head == "E" * 1000
    assert marker_line.startswith("[zodex] … 3,001 lines, ") and marker_line.endswith(r["output_file"])
    assert tail == "T" * 3000
