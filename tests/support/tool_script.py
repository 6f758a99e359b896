"""The conversation a model stand-in plays with an outside client: it asks for every Zodex
tool in turn, one call per model request, and records each result the client sends back.

The client resends the whole conversation with every request, so the next call is decided
by how many results that request carries: nothing is kept per connection, and a client that
retries a request gets the same call again.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

TOOLS = ("exec_command", "write_stdin", "apply_patch", "set_agent_alias")
DONE = "All four Zodex tools answered."
NO_TOOLS = "No Zodex tools were offered."
HANDLE = re.compile(r'"session_handle"\s*:\s*"([^"]+)"')


@dataclass(frozen=True)
class Call:
    tool: str  # Zodex's own name, without the client's prefix
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Recorded:
    """One tool result as the client handed it back to the model."""

    tool: str
    text: str
    is_error: bool


@dataclass
class ToolScript:
    server: str  # the entry's name in the client, part of the tool names it offers
    workdir: str
    alias: str
    results: list[Recorded] = field(default_factory=list)
    offered: list[list[str]] = field(default_factory=list)  # the tool names of each request
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_call(self, returned: list[tuple[str, bool]]) -> Call | None:
        """Record the results not seen before (text, is_error, in the order asked); the call
        to ask for next, None when every tool has answered."""
        texts = [text for text, _ in returned]
        with self._lock:
            for step in range(len(self.results), len(returned)):
                asked = self._planned(step, texts)
                self.results.append(Recorded(asked.tool if asked else "?", *returned[step]))
        return self._planned(len(returned), texts)

    def _planned(self, step: int, texts: list[str]) -> Call | None:
        if step == 0:
            return Call("exec_command", {"cmd": "printf 'zodex-%s\\n' $((6*7))", "workdir": self.workdir})
        if step == 1:
            cmd = 'read line; echo "got $line"'
            return Call("exec_command", {"cmd": cmd, "workdir": self.workdir, "yield_time_ms": 300})
        if step == 2:
            found = HANDLE.search(texts[1])
            handle = found.group(1) if found else "no-handle-in-the-previous-result"
            return Call("write_stdin", {"session_handle": handle, "chars": "hello\n", "yield_time_ms": 10000})
        if step == 3:
            patch = "*** Begin Patch\n*** Add File: standin.txt\n+written through a model\n*** End Patch"
            return Call("apply_patch", {"patch": patch, "workdir": self.workdir})
        if step == 4:
            return Call("set_agent_alias", {"alias": self.alias})
        return None

    def offer(self, names: list[str]) -> dict[str, str]:
        """Note the tools a request offers; Zodex's tool names mapped to the client's."""
        with self._lock:
            self.offered.append(names)
        ours = {tool: f"{self.server}__{tool}" for tool in TOOLS}
        return {tool: name for tool, suffix in ours.items() for name in names if name.endswith(suffix)}

    def transcript(self) -> list[dict[str, Any]]:
        """The results, each shortened to what a reader needs to see it was real."""
        with self._lock:
            return [{"tool": r.tool, "is_error": r.is_error, "text": r.text[:160]} for r in self.results]


def result_text(content: Any) -> str:
    """A tool result's content as text: a string, or a list of blocks with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return json.dumps(content)
