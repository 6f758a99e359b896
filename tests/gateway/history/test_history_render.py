"""``zodex local history`` formats: JSON for programs, Markdown for people."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta, timezone
from typing import Any

from zodex_gateway.history import AgentRecord, FileChange, Invocation
from zodex_gateway.history.render import summary, to_json, to_markdown

STARTED = 1_700_000_000.25  # 2023-11-14 22:13:20.250 UTC
AGENTS = {
    "k7m2": AgentRecord("k7m2", "Rindle implementation", STARTED, STARTED),
    "p0q1": AgentRecord("p0q1", None, STARTED, STARTED),
}


def _invocation(**fields: Any) -> Invocation:
    base = Invocation(
        id="1hf7yat00ghq4",
        agent_id="k7m2",
        tool_name="exec_command",
        args={"cmd": "pytest -q", "workdir": "/work/project"},
        declared_workdir="/work/project",
        real_workdir="/work/project",
        status="ok",
        started_at=STARTED,
        duration_ms=412,
        result={
            "summary": "exited 1 after 0.4s",
            "status": "exited",
            "output": "".join(f"line {n}\n" for n in range(1, 31)),
            "cwd": "/work/project",
            "wall_time_ms": 412,
            "exit_code": 1,
            "termination_reason": "exit",
        },
        error=None,
        session_handle="abcdefg1-0123456789",
        handle_creator=None,
        cross_agent=False,
        incomplete_reason=None,
        files=(),
    )
    return replace(base, **fields)


PATCH = _invocation(
    id="1hf7yat00zzzz",
    agent_id="p0q1",
    tool_name="apply_patch",
    args={"patch": "*** Begin Patch\n…\n*** End Patch", "workdir": "/work/project"},
    duration_ms=2500,
    result="Success. Updated the following files:\nM /work/project/b.py\nA /work/project/c.md\n",
    session_handle=None,
    files=(
        FileChange("move", "/work/project/b.py", "/work/project/a.py", 3, 1, ("@@", "-x", "+y")),
        FileChange("add", "/work/project/c.md", None, 1, 0, ("+# C",)),
    ),
)
STDIN = _invocation(
    id="1hf7yat01aaaa",
    agent_id="p0q1",
    tool_name="write_stdin",
    args={"session_handle": "abcdefg1-0123456789", "chars": "y\n"},
    declared_workdir=None,
    real_workdir=None,
    handle_creator="k7m2",
    cross_agent=True,
    duration_ms=65_000,
    result={
        "summary": "still running after 70.0s; use session_handle abcdefg1-0123456789 to poll",
        "output": "",
    },
)
FAILED = _invocation(
    id="1hf7yat02bbbb",
    agent_id=None,
    status="error",
    args={"cmd": "ls", "workdir": "relative"},
    declared_workdir="relative",
    real_workdir=None,
    result="workdir must be an absolute path: relative",
    error="workdir must be an absolute path: relative",
    session_handle=None,
)
LEFT = _invocation(
    id="1hf7yat03cccc",
    status="incomplete",
    duration_ms=None,
    result=None,
    incomplete_reason="runtime stopped before the call completed",
)


def test_summary_rules() -> None:
    assert summary(_invocation()) == "exited 1 after 0.4s"
    assert summary(PATCH) == "Success. Updated the following files:"
    assert summary(FAILED) == "workdir must be an absolute path: relative"
    assert summary(LEFT) == "runtime stopped before the call completed"
    assert summary(_invocation(status="pending", result=None, duration_ms=None)) == "in progress"


def test_json_shape() -> None:
    document = json.loads(to_json([_invocation(), PATCH, FAILED], raw=False, agents=AGENTS))
    assert list(document) == ["invocations"]
    first, patch, failed = document["invocations"]
    assert first == {
        "id": "1hf7yat00ghq4",
        "agent_id": "k7m2",
        "alias": "Rindle implementation",
        "tool_name": "exec_command",
        "args": {"cmd": "pytest -q", "workdir": "/work/project"},
        "status": "ok",
        "started_at": "2023-11-14T22:13:20.250Z",
        "duration_ms": 412,
        "workdir": "/work/project",
        "real_workdir": "/work/project",
        "summary": "exited 1 after 0.4s",
        "session_handle": "abcdefg1-0123456789",
        "handle_creator": None,
        "cross_agent": False,
        "incomplete_reason": None,
        "files": [],
        "by": "model",
    }
    assert "alias" not in patch  # the agent has none
    assert patch["files"][0] == {
        "operation": "move",
        "path": "/work/project/b.py",
        "old_path": "/work/project/a.py",
        "added": 3,
        "removed": 1,
    }
    assert failed["agent_id"] is None and failed["summary"] == "workdir must be an absolute path: relative"
    assert "result" not in first and "error" not in failed


def test_json_raw_adds_the_exact_result_and_error() -> None:
    document = json.loads(to_json([_invocation(), PATCH, FAILED], raw=True))
    first, patch, failed = document["invocations"]
    assert first["result"] == _invocation().result and first["error"] is None
    assert patch["result"] == PATCH.result and patch["files"][0]["diff"] == ["@@", "-x", "+y"]
    assert failed["error"] == FAILED.error
    assert "alias" not in first  # no agents given
    assert to_json([], raw=True) == '{\n  "invocations": []\n}'


def test_json_keeps_unicode_readable() -> None:
    text = to_json([_invocation(args={"cmd": "echo 日本語"})], raw=False)
    assert "echo 日本語" in text


def test_markdown_for_a_command() -> None:
    text = to_markdown([_invocation()], AGENTS, raw=False)
    lines = text.splitlines()
    assert lines[0] == "## 2023-11-14 22:13:20Z · k7m2 (Rindle implementation) · exec_command · ok · 412 ms"
    assert lines[1] == "- id `1hf7yat00ghq4` · workdir `/work/project`"
    assert lines[2] == "- command: `pytest -q`"
    assert lines[3] == "- exited 1 after 0.4s · exit code 1"
    assert lines[4] == "- output (last 20 of 30 lines):"
    assert lines[5:] == ["```text", *(f"line {n}" for n in range(11, 31)), "```"]


def test_markdown_for_other_tools_and_outcomes() -> None:
    text = to_markdown([PATCH, STDIN, FAILED, LEFT], AGENTS, raw=False)
    assert "## 2023-11-14 22:13:20Z · p0q1 · apply_patch · ok · 2.5 s" in text
    assert (
        "- Success. Updated the following files:\n"
        "- move `/work/project/a.py` → `/work/project/b.py` (+3 −1)\n"
        "- add `/work/project/c.md` (+1 −0)\n"
    ) in text
    assert "## 2023-11-14 22:13:20Z · p0q1 · write_stdin · ok · 1m 05s" in text
    assert '- session `abcdefg1-0123456789`, created by k7m2 (another agent) · typed `"y\\n"`' in text
    assert "## 2023-11-14 22:13:20Z · unattributed · exec_command · error · 412 ms" in text
    assert "- error: workdir must be an absolute path: relative" in text
    assert "· exec_command · incomplete\n" in text
    assert "- incomplete: runtime stopped before the call completed" in text
    assert "```" not in text  # no output, no raw blocks
    assert to_markdown([], AGENTS, raw=False) == "No invocations.\n"


def test_markdown_raw_shows_exact_arguments_and_result() -> None:
    tricky = _invocation(
        args={"cmd": "printf '```'\necho done", "workdir": "/w"}, result="text with ``` fence"
    )
    text = to_markdown([tricky], AGENTS, raw=True)
    assert "- command:\n````sh\nprintf '```'\necho done\n````" in text
    assert (
        'arguments:\n````json\n{\n  "cmd": "printf \'```\'\\necho done",\n  "workdir": "/w"\n}\n````' in text
    )
    assert "result:\n````text\ntext with ``` fence\n````" in text
    structured = to_markdown([_invocation()], AGENTS, raw=True)
    assert 'result:\n```json\n{\n  "summary": "exited 1 after 0.4s",' in structured
    assert "line 1\\nline 2" in structured  # the full, exact output, not the tail


def test_markdown_in_another_time_zone() -> None:
    text = to_markdown([_invocation()], AGENTS, raw=False, tz=timezone(timedelta(hours=2)))
    assert text.startswith("## 2023-11-15 00:13:20+02:00 · k7m2")
