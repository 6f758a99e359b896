"""docs/output.md#screens end to end: real full-screen programs from Debian, driven through the
MCP tools, their screens compared cell by cell with tmux's for the same program and keys.

tmux is the reference terminal: a detached server of its own (a unique socket, no user
configuration, no status line) with one 200×50 pane, the size of a session's PTY. The
same bytes go to both (``send-keys -H``); the test waits until tmux's pane shows what the
result showed, and fails with both screens when it never does. tmux's pane title defaults
to the host name, so titles are not compared.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyte import charsets

from tests.support.gateway import GatewayEnv, Mcp, gateway_env, stdio_gateway
from tests.support.slowdown import scaled
from zodex_gateway.history import HistoryStore

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux (Debian's) is the reference terminal"),
]

ROWS, COLS = 50, 200
# What a session's command gets (zodex_worker/service.py COMMAND_ENV), given to tmux's too.
COMMAND_ENV = "TERM=xterm-256color PAGER=cat GIT_PAGER=cat MANPAGER=cat LESS=FRX NO_COLOR=1"
_CONTROLS = re.compile(r"(\x1b\[[0-9;:]*m|\x0e|\x0f)")  # what capture-pane -e adds
VI = "vi -u DEFAULTS -i NONE"  # Debian's defaults.vim, no user vimrc or viminfo on either side


class TmuxPane:
    """One program in a pane of a private tmux server."""

    def __init__(self, root: Path, cmd: str, cwd: Path) -> None:
        self.socket = f"zx-screens-{uuid.uuid4().hex[:12]}"
        conf = root / "tmux.conf"
        conf.write_text(
            f"set -g status off\nset -g default-size {COLS}x{ROWS}\nset -sg escape-time 0\n"
            "set -g default-terminal xterm-256color\n"
        )
        # A placeholder first, then the program in a pane of the right size. LINES and
        # COLUMNS, which a shell may have exported at tmux's first 80x24, would override
        # the PTY's size for curses (dialog).
        self._tmux("-f", str(conf), "new-session", "-d", "-x", str(COLS), "-y", str(ROWS), "-s", "t", "cat")
        self._tmux("resize-window", "-t", "t", "-x", str(COLS), "-y", str(ROWS))
        size = self._tmux("display", "-p", "-t", "t", "#{pane_width}x#{pane_height}").strip()
        assert size == f"{COLS}x{ROWS}", size
        self._tmux(
            "respawn-pane",
            "-k",
            "-t",
            "t",
            "-c",
            str(cwd),
            f"env -u LINES -u COLUMNS {COMMAND_ENV} bash -c '{cmd}'",
        )

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True)
        return done.stdout

    def type(self, chars: str) -> None:
        if chars:
            self._tmux("send-keys", "-t", "t", "-H", *(f"{b:02x}" for b in chars.encode()))

    def capture(self) -> dict[str, Any]:
        """The pane's cells as text: DEC line drawing (tmux's cells marked with SO ... SI by
        ``capture-pane -e``) as the Unicode box characters a terminal draws for them."""
        text = self._tmux("capture-pane", "-e", "-p", "-t", "t")
        rows = [_cells(row).rstrip() for row in text.split("\n")[:ROWS]]
        while rows and not rows[-1]:
            rows.pop()
        y, x, alternate = self._tmux(
            "display", "-p", "-t", "t", "#{cursor_y} #{cursor_x} #{alternate_on}"
        ).split()
        return {"rows": rows, "cursor": [int(y), int(x)], "alternate": alternate == "1"}

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


def _cells(row: str) -> str:
    cells, graphics = [], False
    for piece in _CONTROLS.split(row):
        if piece in ("\x0e", "\x0f"):
            graphics = piece == "\x0e"
        elif not piece.startswith("\x1b"):
            cells.append(piece.translate(charsets.VT100_MAP) if graphics else piece)
    return "".join(cells)


@contextmanager
def tmux_pane(root: Path, cmd: str, cwd: Path) -> Iterator[TmuxPane]:
    pane = TmuxPane(root, cmd, cwd)
    try:
        yield pane
    finally:
        pane.close()


async def same_as_tmux(pane: TmuxPane, screen: dict[str, Any], timeout: float = 10.0) -> None:
    """tmux's pane comes to show ``screen``, cell by cell, cursor and alternate screen too."""
    expected = {key: screen[key] for key in ("rows", "cursor", "alternate")}
    assert screen["size"] == [ROWS, COLS]
    deadline = time.monotonic() + scaled(timeout)
    while (got := pane.capture()) != expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert got == expected, f"tmux shows:\n{_described(got)}\nthe result showed:\n{_described(expected)}"


def _described(screen: dict[str, Any]) -> str:
    rows = "".join(f"{i:2} {row!r}\n" for i, row in enumerate(screen["rows"]) if row)
    return f"{rows}cursor {screen['cursor']}, alternate {screen['alternate']}"


@asynccontextmanager
async def gateway() -> AsyncIterator[tuple[GatewayEnv, Mcp]]:
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            yield genv, mcp


async def settled(mcp: Mcp, handle: str, chars: str = "") -> dict[str, Any]:
    """The result of typing ``chars`` (or a poll), once the program's output went quiet."""
    return await mcp.write(handle, chars=chars, yield_time_ms=2000)


def notice_only(result: dict[str, Any]) -> None:
    assert result["output"].startswith("[zodex] a full-screen program: its screen is in the `screen` field (")
    assert "\n" not in result["output"]


def twin_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """Two directories with the same name: one for Zodex, one for tmux (``a/w``, ``b/w``),
    so that what a program shows of its directory or files is the same on both."""
    ours, theirs = tmp_path / "a" / "w", tmp_path / "b" / "w"
    ours.mkdir(parents=True)
    theirs.mkdir(parents=True)
    return ours, theirs


async def test_vi_open_type_and_write(tmp_path: Path) -> None:
    ours, theirs = twin_dirs(tmp_path)
    with gateway_env() as genv:
        async with stdio_gateway(genv) as mcp:
            with tmux_pane(genv.root, f"{VI} notes.txt", theirs) as pane:
                r = await mcp.exec(f"{VI} notes.txt", str(ours), wait_for='"notes.txt"')
                opened = await settled(mcp, r["session_handle"])
                notice_only(opened)
                assert opened["screen"]["alternate"] and opened["screen"]["rows"][1] == "~"
                assert opened["screen"]["rows"][-1].startswith('"notes.txt" [New]')
                await same_as_tmux(pane, opened["screen"])
                shown = [opened["screen"]]
                for keys in ("ihello screens", "\x1b", "o\x1b[Asecond\x1b"):
                    typed = await settled(mcp, r["session_handle"], keys)
                    pane.type(keys)
                    await same_as_tmux(pane, typed["screen"])
                    shown.append(typed["screen"])
                # Up in insert mode went back to the first line's start, where "second" was typed.
                assert typed["screen"]["rows"][:2] == ["secondhello screens", ""]
                done = await mcp.write(r["session_handle"], chars=":wq\r", yield_time_ms=5000)
        # History keeps each call's result as it was given: the last screen of each call.
        with HistoryStore(genv.state_home / "zodex" / "local" / "history", recover=False) as store:
            stored = [inv.result for inv in store.invocations() if inv.tool_name == "write_stdin"]
    assert done["status"] == "exited" and done["exit_code"] == 0 and "screen" not in done
    assert (ours / "notes.txt").read_text() == "secondhello screens\n\n"
    assert [result.get("screen") for result in stored] == [*shown, None]


async def test_less_pages_down_and_quits(tmp_path: Path) -> None:
    ours, theirs = twin_dirs(tmp_path)
    for where in (ours, theirs):
        (where / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 501)))
    # Zodex sets LESS=FRX for commands (no alternate screen, quit at the end); a person's less.
    cmd = "env -u LESS less long.txt"
    async with gateway() as (genv, mcp):
        with tmux_pane(genv.root, cmd, theirs) as pane:
            r = await mcp.exec(cmd, str(ours), wait_for="long.txt")
            first = await settled(mcp, r["session_handle"])
            notice_only(first)
            assert first["screen"]["rows"][:2] == ["line 1", "line 2"] and first["screen"]["alternate"]
            await same_as_tmux(pane, first["screen"])
            paged = await settled(mcp, r["session_handle"], " ")
            pane.type(" ")
            assert paged["screen"]["rows"][0] == "line 50" and paged["screen"]["rows"][-1] == ":"
            await same_as_tmux(pane, paged["screen"])
            done = await mcp.write(r["session_handle"], chars="q", yield_time_ms=5000)
    assert done["status"] == "exited" and "screen" not in done


async def test_top_draws_a_screen_and_top_batch_prints_lines(tmp_path: Path) -> None:
    async with gateway() as (genv, mcp):
        for _attempt in range(5):
            batch = await mcp.exec("top -b -n 1 -w 200", str(tmp_path))
            # procps-ng 4.0.2's top gives up ("library failed pids statistics, at …: No such
            # process") when a process ends while it reads them, as a busy test run's do.
            if "library failed" not in batch["output"]:
                break
        assert "screen" not in batch and batch["status"] == "exited"
        assert any(line.split()[:2] == ["PID", "USER"] for line in batch["output"].splitlines()), batch
        with tmux_pane(genv.root, "top -d 60", tmp_path) as pane:
            r = await mcp.exec("top -d 60", str(tmp_path), wait_for="PID USER")
            shown = await settled(mcp, r["session_handle"])
            notice_only(shown)
            screen = shown["screen"]
            # top draws on the main screen (home, clear, rows), not the alternate one.
            assert not screen["alternate"] and screen["rows"][0].startswith("top - ")
            header = next(i for i, row in enumerate(screen["rows"]) if row.split()[:2] == ["PID", "USER"])
            # Its figures change by the second: the layout is compared, cell by cell for the
            # column header, and the number of rows (a full screen of processes).
            deadline = time.monotonic() + scaled(10)
            while (reference := pane.capture())["rows"][header : header + 1] != screen["rows"][
                header : header + 1
            ]:
                assert time.monotonic() < deadline, (reference, screen)
                await asyncio.sleep(0.05)
            assert len(reference["rows"]) == len(screen["rows"]) == ROWS
            assert reference["alternate"] == screen["alternate"] and reference["rows"][0].startswith("top - ")
            done = await mcp.write(r["session_handle"], chars="q", yield_time_ms=5000)
    assert done["status"] == "exited" and "screen" not in done


async def test_python_repl_stays_line_output_like_tmux_shows_it(tmp_path: Path) -> None:
    cmd = "/usr/bin/python3 -q"
    async with gateway() as (genv, mcp):
        with tmux_pane(genv.root, cmd, tmp_path) as pane:
            r = await mcp.exec(cmd, str(tmp_path), wait_for=">>> $")
            out = r["output"]
            for line in ("print(6 * 7)\r", "for i in range(3):\r", "  print(i)\r", "\r"):
                typed = await mcp.write(r["session_handle"], chars=line, wait_for=r"(>>>|\.\.\.) $")
                pane.type(line)
                assert "screen" not in typed
                out += typed["output"]
            rows = [row.rstrip() for row in out.split("\n")]
            await same_as_tmux(
                pane, {"rows": rows, "cursor": [len(rows) - 1, 4], "alternate": False, "size": [50, 200]}
            )
            assert rows[:2] == [">>> print(6 * 7)", "42"]
            done = await mcp.write(r["session_handle"], chars="\x04", yield_time_ms=5000)
    assert done["status"] == "exited"


async def test_dialog_yesno_answered_with_a_key(tmp_path: Path) -> None:
    cmd = 'dialog --yesno "Proceed with the screens?" 7 40; echo "answer $?"'
    async with gateway() as (genv, mcp):
        with tmux_pane(genv.root, cmd, tmp_path) as pane:
            r = await mcp.exec(cmd, str(tmp_path), wait_for="Proceed with the screens")
            shown = await settled(mcp, r["session_handle"])
            notice_only(shown)
            rows = shown["screen"]["rows"]
            assert any("Proceed with the screens?" in row for row in rows)
            assert any("< Yes >" in row and "< No  >" in row for row in rows)
            await same_as_tmux(pane, shown["screen"])
            answered = await mcp.write(r["session_handle"], chars="n", yield_time_ms=5000)
    assert answered["status"] == "exited" and "screen" not in answered
    assert answered["output"].endswith("answer 1\n")
