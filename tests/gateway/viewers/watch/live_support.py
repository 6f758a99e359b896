"""A real Local runtime, a real `zodex local watch --no-open`, a real MCP client, and
Debian's Chromium driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, async_playwright

from tests.gateway.viewers.watch.support import LIVEBOARD_LINE
from tests.support.gateway import Mcp
from tests.support.local import ZODEX, LocalEnv
from tests.support.slowdown import scaled

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[4] / "test-artifacts" / "liveboard"


@dataclass
class Watching:
    url: str
    port: int
    secret: str
    process: subprocess.Popen[str]

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Stop the viewer as a person would (Ctrl-C is SIGINT); its exit code and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            _, stderr = self.process.communicate(timeout=scaled(15))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        return self.process.returncode, stderr


@contextmanager
def watching(local: LocalEnv) -> Iterator[Watching]:
    process = subprocess.Popen(
        [ZODEX, "local", "watch", "--no-open"],
        env=local.env(BROWSER="false"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=local.root,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    found = LIVEBOARD_LINE.fullmatch(line.strip())
    if found is None:
        process.kill()
        process.wait()
        raise AssertionError(
            f"unexpected first line {line!r}; stderr: {process.stderr and process.stderr.read()}"
        )
    watch = Watching(found.group(1), int(found.group(2)), found.group(3), process)
    try:
        yield watch
    finally:
        if process.poll() is None:
            watch.stop()


async def call(mcp: Mcp, conversation: str, tool: str, **args: Any) -> Any:
    """A tool call as conversation ``conversation`` (its agent), checked for success."""
    result = await mcp.client.call_tool(tool, args, meta={"openai/session": conversation})
    assert not result.is_error, result.content[0].text
    return result.structured_content


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
            headless=True,
        )
        try:
            yield browser
        finally:
            await browser.close()
