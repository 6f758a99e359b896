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
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import GatewayEnv, Mcp, gateway_env, stdio_gateway
from tests.support.slowdown import scaled

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux (Debian's) is the reference terminal"),
]

ROWS, COLS = 50, 200
# What a session's command gets (zodex_worker/service.py COMMAND_ENV), given to tmux's too.
COMMAND_ENV = "TERM=xterm-256color PAGER=cat GIT_PAGER=cat MANPAGER=cat LESS=FRX NO_COLOR=1"
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
        self._tmux(
            "-f", str(conf), "new-session", "-d", "-x", str(COLS), "-y", str(ROWS), "-s", "t", "-c", str(cwd),
            f"env {COMMAND_ENV} bash -c '{cmd}'",
        )  # fmt: skip

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True)
        return done.stdout

    def type(self, chars: str) -> None:
        if chars:
            self._tmux("send-keys", "-t", "t", "-H", *(f"{b:02x}" for b in chars.encode()))

    def capture(self) -> dict[str, Any]:
        rows = [row.rstrip() for row in self._tmux("capture-pane", "-p", "-t", "t").split("\n")[:ROWS]]
        while rows and not rows[-1]:
            rows.pop()
        y, x, alternate = self._tmux(
            "display", "-p", "-t", "t", "#{cursor_y} #{cursor_x} #{alternate_on}"
        ).split()
        return {"rows": rows, "cursor": [int(y), int(x)], "alternate": alternate == "1"}

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


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
    assert got == expected


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
    async with gateway() as (genv, mcp):
        with tmux_pane(genv.root, f"{VI} notes.txt", theirs) as pane:
            r = await mcp.exec(f"{VI} notes.txt", str(ours), wait_for='"notes.txt"')
            opened = await settled(mcp, r["session_handle"])
            notice_only(opened)
            assert opened["screen"]["alternate"] and opened["screen"]["rows"][1] == "~"
            assert opened["screen"]["rows"][-1].startswith('"notes.txt" [New]')
            await same_as_tmux(pane, opened["screen"])
            for keys in ("ihello screens", "\x1b", "o\x1b[Asecond\x1b"):
                typed = await settled(mcp, r["session_handle"], keys)
                pane.type(keys)
                await same_as_tmux(pane, typed["screen"])
            # Up in insert mode went back to the first line's start, where "second" was typed.
            assert typed["screen"]["rows"][:2] == ["secondhello screens", ""]
            done = await mcp.write(r["session_handle"], chars=":wq\r", yield_time_ms=5000)
    assert done["status"] == "exited" and done["exit_code"] == 0 and "screen" not in done
    assert (ours / "notes.txt").read_text() == "secondhello screens\n\n"
