"""The agent's plain git against github.com, through git-remote-zodex and the publisher, in a
real Sprite through MCP: clone and fetch work, push in default mode fails clearly, and the
agent never holds a token."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sprite.github.github_support import REPOS, Rig, github_sprite, run
from tests.sprite.serve.sprite_support import tool_json
from tests.support.accounts import kill_processes_of, require_root
from tests.support.slowdown import scaled
from tests.support.waiting import wait_until
from zodex_gateway.sprite.github.state import YoloState


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    require_root()
    with github_sprite() as running:
        yield running


async def test_clone_fetch_and_a_refused_push_in_default_mode(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    before = rig.hub.refs("acme/widgets")
    async with rig.sprite.mcp() as mcp:
        code, output = await run(
            mcp, "git clone https://github.com/acme/widgets && cat widgets/README.md", workspace
        )
        assert code == 0, output
        assert "# acme/widgets" in output
        code, output = await run(
            mcp, "git config remote.origin.url && git fetch && git pull --ff-only", f"{workspace}/widgets"
        )
        assert code == 0, output
        assert output.splitlines()[0] == "https://github.com/acme/widgets"
        code, output = await run(
            mcp,
            "git commit -q --allow-empty -m change && git push origin HEAD:refs/heads/feature",
            f"{workspace}/widgets",
        )
        assert code != 0
        assert "direct push is not enabled (default mode: clone and fetch only)" in output, output
        assert "zodex-agent github publish-pr" in output
    assert rig.hub.refs("acme/widgets") == before


async def test_a_repo_the_reader_app_does_not_cover_is_not_found(rig: Rig) -> None:
    async with rig.sprite.mcp() as mcp:
        code, output = await run(mcp, "git clone https://github.com/other/thing", str(rig.sprite.workspace))
    assert code != 0
    assert "repository other/thing is not reachable with the reader App" in output, output


async def test_publish_pr_pushes_a_new_agent_branch_and_opens_the_pull(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    async with rig.sprite.mcp() as mcp:
        code, output = await run(
            mcp,
            "git clone -q https://github.com/acme/gadgets && cd gadgets && echo more >> README.md"
            " && git commit -qam 'More words' && git rev-parse HEAD",
            workspace,
        )
        assert code == 0, output
        head = output.strip().splitlines()[-1]
        code, output = await run(
            mcp,
            "zodex-agent github publish-pr --repo acme/gadgets --title 'More words' --body 'Why: tests' --draft",
            f"{workspace}/gadgets",
        )
    assert code == 0, output
    lines = dict(line.split(": ", 1) for line in output.splitlines() if ": " in line)
    assert output.splitlines()[0] == "publish-pr: created"
    pull = rig.hub.pulls[-1]
    assert (pull.repo, pull.title, pull.body, pull.base, pull.draft) == (
        "acme/gadgets",
        "More words",
        "Why: tests",
        "main",
        True,
    )
    assert lines["repo"] == "acme/gadgets"
    assert lines["number"] == str(pull.number)
    assert lines["url"] == f"{rig.hub.url}/acme/gadgets/pull/{pull.number}"
    assert (lines["branch"], lines["base"], lines["draft"]) == (pull.head, "main", "true")
    assert re.fullmatch(r"agent/\d{10}-[a-z0-9]{8}", pull.head), pull.head
    assert rig.hub.refs("acme/gadgets")[f"refs/heads/{pull.head}"] == head


async def test_publish_pr_refuses_a_dirty_worktree_a_wrong_origin_and_bad_fields(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    pulls, refs = len(rig.hub.pulls), rig.hub.refs("acme/widgets")
    async with rig.sprite.mcp() as mcp:
        code, output = await run(
            mcp, "git clone -q https://github.com/acme/widgets dirty && echo x >> dirty/README.md", workspace
        )
        assert code == 0, output
        refusals = {
            "cd dirty && zodex-agent github publish-pr --repo acme/widgets --title T":
                "publish-pr requires a clean worktree; commit or stash changes first",
            "cd dirty && git checkout -q . && zodex-agent github publish-pr --repo acme/gadgets --title T":
                "current checkout is for acme/widgets, but publish-pr targeted acme/gadgets",
            "cd dirty && git remote set-url origin https://gitlab.com/acme/widgets && zodex-agent github publish-pr --repo acme/widgets --title T":
                "git remote origin does not point to a supported GitHub repo URL: https://gitlab.com/acme/widgets",
            "cd dirty && git remote set-url origin git@github.com:acme/widgets.git && zodex-agent github publish-pr --repo acme/widgets --title ''":
                "PR title cannot be empty",
            f"cd dirty && zodex-agent github publish-pr --repo acme/widgets --title {'t' * 241}":
                "PR title exceeds limit (241 > 240)",
            "cd dirty && zodex-agent github publish-pr --repo acme/widgets --title T --body \"$(head -c 16001 /dev/zero | tr '\\0' b)\"":
                "PR body exceeds limit (16001 > 16000)",
            "cd dirty && zodex-agent github publish-pr --repo 'acme/../x' --title T": "repo must be in owner/repo form",
            "cd dirty && zodex-agent github publish-pr --repo acme/widgets --title T --base 'a..b'": "ref is invalid",
        }  # fmt: skip
        for command, message in refusals.items():
            code, output = await run(mcp, command, workspace)
            assert code != 0 and message in output, (command, output)
    assert len(rig.hub.pulls) == pulls and rig.hub.refs("acme/widgets") == refs


async def test_yolo_for_one_repo_allows_branch_tag_delete_and_force_push_and_nothing_else(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    rig.state.write_yolo(YoloState(repos={"acme/widgets": time.time() + 3600}), rig.owner)
    try:
        async with rig.sprite.mcp() as mcp:
            script = (
                "git clone -q https://github.com/acme/widgets yolo && cd yolo"
                " && git commit -q --allow-empty -m one && git push -q origin HEAD:refs/heads/yolo-branch"
                " && git tag v1 && git push -q origin v1"
                " && git commit -q --amend --allow-empty -m rewritten && git push -q --force origin HEAD:refs/heads/yolo-branch"
                " && git rev-parse HEAD"
            )
            code, output = await run(mcp, script, workspace)
            assert code == 0, output
            rewritten = output.strip().splitlines()[-1]
            refs = rig.hub.refs("acme/widgets")
            assert refs["refs/heads/yolo-branch"] == rewritten and "refs/tags/v1" in refs
            code, output = await run(mcp, "git push -q origin :refs/heads/yolo-branch", f"{workspace}/yolo")
            assert code == 0, output
            assert "refs/heads/yolo-branch" not in rig.hub.refs("acme/widgets")
            code, output = await run(
                mcp,
                "git clone -q https://github.com/acme/gadgets other && cd other && git commit -q --allow-empty -m x"
                " && git push origin HEAD:refs/heads/nope",
                workspace,
            )
            assert code != 0 and "GitHub YOLO mode is not active for repo acme/gadgets" in output, output
            assert "refs/heads/nope" not in rig.hub.refs("acme/gadgets")
            rig.state.write_yolo(YoloState(repos={"acme/widgets": time.time() - 1}), rig.owner)
            code, output = await run(mcp, "cd yolo && git push origin HEAD:refs/heads/late", workspace)
            assert code != 0 and "GitHub YOLO mode has expired" in output, output
            assert "refs/heads/late" not in rig.hub.refs("acme/widgets")
    finally:
        rig.state.write_yolo(YoloState(), rig.owner)


async def test_hostile_requests_on_the_socket_are_refused_with_nothing_changed(rig: Rig) -> None:
    script = Path(__file__).with_name("raw_client.py")
    copy = rig.sprite.workspace / "raw_client.py"
    shutil.copy(script, copy)
    os.chown(copy, rig.sprite.agent.uid, rig.sprite.agent.gid)
    before = {repo: rig.hub.refs(repo) for repo in REPOS}
    rig.state.write_yolo(YoloState(repos={"acme/widgets": None}), rig.owner)
    raw = f"python3 {copy} {rig.socket}"
    lines = {
        "not json": "line is not JSON",
        "[1, 2]": "line is not a JSON object",
        '{"op": "nope"}': "unknown op 'nope'",
        '{"op": "git", "service": "git-upload-archive", "url": "https://github.com/acme/widgets"}': "unsupported git service",
        '{"op": "git", "service": "git-upload-pack", "url": "https://github.com/acme/../etc"}': "not a github.com repository URL",
        '{"op": "git", "service": "git-upload-pack", "url": "https://evil.example/acme/widgets"}': "not a github.com repository URL",
        '{"op": "git", "service": "git-upload-pack", "url": "https://x:y@github.com/acme/widgets"}': "not a github.com repository URL",
        '{"op": "git", "service": "git-receive-pack", "url": "https://github.com/acme/widgets", "ticket": "forged"}':
            "the publish ticket is unknown or expired",
        '{"op": "open-pr", "ticket": "forged"}': "the publish ticket is unknown or expired",
        '{"op": "publish-pr", "repo": "acme/widgets", "title": 5}': "title must be a string",
        '{"op": "publish-pr", "repo": "acme/widgets", "title": "t", "draft": "yes"}': "draft must be true or false",
        '{"op": "publish-pr", "repo": "other/thing", "title": "t"}': "repo is not covered by the writer App's installation",
        '{"op": "request-push", "repo": "acme/widgets", "ttl_seconds": true}': "ttl_seconds must be a whole number",
        '{"op": "request-push", "repo": "acme/widgets", "ttl_seconds": 0}': "ttl_seconds must be a whole number",
        '{"op": "revoke-push", "repo": "../../etc"}': "repo must be in owner/repo form",
    }  # fmt: skip
    try:
        async with rig.sprite.mcp() as mcp:
            for line, message in lines.items():
                code, output = await run(mcp, f"{raw} line {shlex.quote(line)}", "/")
                assert '"ok":false' in output and message in output, (line, output)
            code, output = await run(mcp, f"{raw} line \"$(head -c 70000 /dev/zero | tr '\\0' a)\"", "/")
            assert "line longer than 65536 bytes" in output, output
            for ref in ("refs/heads/../x", "refs/heads/a\\\\b", "refs/heads/x/", "HEAD"):
                code, output = await run(mcp, f"{raw} push acme/widgets {shlex.quote(ref)}", "/")
                assert "ng " in output or "error" in output, (ref, output)
                assert "ok refs" not in output, (ref, output)
            # An oversized push: more than the 2 MiB max_push_bytes of these settings.
            code, output = await run(
                mcp,
                "git clone -q https://github.com/acme/widgets big && cd big && head -c 3000000 /dev/urandom > blob"
                " && git add blob && git commit -qm big && git push origin HEAD:refs/heads/big",
                str(rig.sprite.workspace),
            )
            assert code != 0 and "too large" in output, output
    finally:
        rig.state.write_yolo(YoloState(), rig.owner)
    assert {repo: rig.hub.refs(repo) for repo in REPOS} == before
    assert any("refused" in line for line in rig.log)


async def test_no_other_account_is_served(rig: Rig) -> None:
    done = subprocess.run(
        ["/usr/sbin/runuser", "-u", rig.sprite.service.name, "--", "python3", "-c",
         "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
         " print(s.makefile().readline())", str(rig.socket)],  # refused before it says anything
        capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert f"uid {rig.sprite.service.uid} may not use the Zodex publisher" in done.stdout, done


async def test_the_agent_finds_no_key_or_token_anywhere(rig: Rig) -> None:
    secrets = [
        rig.reader.private_key.decode().splitlines()[1],
        rig.writer.private_key.decode().splitlines()[1],
    ]
    async with rig.sprite.mcp() as mcp:
        # Make the publisher mint and use tokens first.
        code, output = await run(
            mcp, "git clone -q https://github.com/acme/widgets leak && echo cloned", str(rig.sprite.workspace)
        )
        assert code == 0, output
        pid = rig.publisher_pid()
        probes = [
            f"cat {rig.directory}/*.pem {rig.directory}/settings.json",
            f"ls -la {rig.directory}; ls -la {rig.directory}/scratch",
            f"grep -r -s . {rig.directory} {rig.socket.parent} {rig.sprite.base}/etc {rig.sprite.state_dir}",
            f"cat /proc/{pid}/environ; tr '\\0' ' ' < /proc/{pid}/cmdline; cat /proc/{pid}/maps",
            f"ls -l /proc/{pid}/fd; cat /proc/{pid}/mem",
            "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; tr '\\0' ' ' < /proc/*/cmdline 2>/dev/null",
            "env; git config --list --show-origin; cat ~/.gitconfig ~/.git-credentials ~/.config/git/credentials",
            "grep -r -s -I . ~ /etc/zodex 2>/dev/null | head -c 2000000",
            f"grep -r -s -I . {rig.sprite.workspace} | head -c 2000000",
            "ls ~/.cache ~/.config 2>&1; GIT_TERMINAL_PROMPT=0 git credential fill <<< $'protocol=https\\nhost=github.com\\n'",
        ]
        for probe in probes:
            _, output = await run(mcp, probe, str(rig.sprite.workspace))
            for token in rig.hub.tokens:
                assert token not in output, probe
            for secret in secrets:
                assert secret not in output, probe
            assert "x-access-token" not in output and "ghs_" not in output, (probe, output[-500:])
        assert rig.hub.tokens, "the publisher minted no token: the probes proved nothing"


def _field(output: str, name: str) -> str:
    return next(line.split(": ", 1)[1] for line in output.splitlines() if line.startswith(f"{name}: "))


async def test_request_push_approved_then_expired_then_revoked(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    async with rig.sprite.mcp() as mcp:
        code, output = await run(
            mcp, "git clone -q https://github.com/acme/gadgets granted && cd granted && git commit -q --allow-empty -m g",
            workspace,
        )  # fmt: skip
        assert code == 0, output
        code, output = await run(
            mcp, "zodex-agent github request-push --repo acme/gadgets --ttl 8s", workspace
        )
        assert code == 0 and output.startswith("request-push: pending"), output
        assert _field(output, "verification-uri") == f"{rig.hub.url}/login/device"
        user_code = _field(output, "user-code")
        code, output = await run(mcp, "zodex-agent github list-grants", workspace)
        assert f"request: acme/gadgets state=pending user-code={user_code}" in output, output
        rig.hub.approve(user_code, {"acme/gadgets"})
        wait_until(
            lambda: rig.state.grant("acme/gadgets", time.time()) is not None, timeout=30, what="the grant"
        )
        code, output = await run(mcp, "zodex-agent github list-grants", workspace)
        assert (
            "grants: 1" in output
            and "grant: acme/gadgets state=active" in output
            and "source=agent" in output
        )
        code, output = await run(mcp, "git push -q origin HEAD:refs/heads/granted", f"{workspace}/granted")
        assert code == 0, output
        assert "refs/heads/granted" in rig.hub.refs("acme/gadgets")
        grant = rig.state.grant("acme/gadgets", time.time())
        assert grant is not None and grant.token.startswith("ghu_") and grant.expires_at is not None
        # The TTL passes: the grant no longer pushes.
        wait_until(lambda: time.time() > grant.expires_at + 0.5, timeout=30, what="the grant's TTL")  # type: ignore[operator]
        code, output = await run(mcp, "git push origin HEAD:refs/heads/late-grant", f"{workspace}/granted")
        assert code != 0 and "GitHub push grant for acme/gadgets has expired" in output, output
        assert "refs/heads/late-grant" not in rig.hub.refs("acme/gadgets")
        # list-grants sweeps: the expired token is revoked at GitHub and dropped from the file.
        code, output = await run(mcp, "zodex-agent github list-grants", workspace)
        assert "grant: acme/gadgets state=expired" in output, output
        assert grant.token in rig.hub.revoked and grant.token not in rig.hub.tokens
        swept = rig.state.grants()
        assert [(g.token, g.revoked_at_github) for g in swept] == [("", True)]
        code, output = await run(mcp, "zodex-agent github revoke-push --repo acme/gadgets", workspace)
        assert code == 0 and "revoke-push: revoked" in output, output
        assert rig.state.grants() == []
        code, output = await run(mcp, "git push origin HEAD:refs/heads/late-grant", f"{workspace}/granted")
        assert code != 0 and "direct push is not enabled" in output, output


async def test_a_denied_or_expired_request_grants_nothing(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    async with rig.sprite.mcp() as mcp:
        codes = []
        for repo in ("acme/widgets", "acme/gadgets"):
            code, output = await run(mcp, f"zodex-agent github request-push --repo {repo}", workspace)
            assert code == 0, output
            codes.append(_field(output, "user-code"))
        rig.hub.deny(codes[0])
        rig.hub.expire(codes[1])

        async def listed() -> str:
            return (await run(mcp, "zodex-agent github list-grants", workspace))[1]

        deadline = time.monotonic() + scaled(30)
        output = await listed()
        while not ("state=denied" in output and "state=expired" in output) and time.monotonic() < deadline:
            output = await listed()  # the publisher polls GitHub at its interval (1 s here)
        assert "request: acme/widgets state=denied" in output and "authorization was cancelled" in output, (
            output
        )
        assert "request: acme/gadgets state=expired" in output, output
        assert "grants: 0" in output
        for bad, message in {
            "--repo nope": "repo must be in owner/repo form",
            "--repo acme/widgets --ttl 0m": "TTL must be greater than zero",
            "--repo acme/widgets --ttl 10y": "unsupported TTL unit `y`",
            "--repo other/thing": "repo is not covered by the writer App's installation",
        }.items():
            code, output = await run(mcp, f"zodex-agent github request-push {bad}", workspace)
            assert code != 0 and message in output, (bad, output)
    assert rig.state.grants() == []


async def test_the_publisher_killed_mid_push_leaves_githubs_ref_old_or_new(rig: Rig) -> None:
    workspace = str(rig.sprite.workspace)
    rig.state.write_yolo(YoloState(repos={"acme/widgets": None}), rig.owner)
    rig.hub.hold = threading.Event()
    rig.hub.held.clear()
    try:
        async with rig.sprite.mcp() as mcp:
            code, output = await run(
                mcp, "git clone -q https://github.com/acme/widgets killed && cd killed"
                " && git commit -q --allow-empty -m k && git rev-parse HEAD", workspace,
            )  # fmt: skip
            assert code == 0, output
            new = output.strip().splitlines()[-1]
            started = tool_json(await mcp.call_tool("exec_command", {
                "cmd": "git push origin HEAD:refs/heads/killed", "workdir": f"{workspace}/killed", "yield_time_ms": 50,
            }))  # fmt: skip
            assert started["status"] == "running", started
            wait_until(rig.hub.held.is_set, timeout=60, what="the publisher's push to reach GitHub")
            kill_processes_of(rig.publisher.uid)  # the publisher, its receive-pack and hook
            rig.hub.hold.set()
            result = started
            while result["status"] == "running":
                result = tool_json(await mcp.call_tool(
                    "write_stdin", {"session_handle": started["session_handle"], "yield_time_ms": 20000}
                ))  # fmt: skip
            assert result["exit_code"] != 0
            assert rig.hub.refs("acme/widgets").get("refs/heads/killed") in (None, new)
            subprocess.run(["git", "-C", str(rig.hub.repo_path("acme/widgets")), "fsck", "--strict"], check=True,
                           capture_output=True)  # fmt: skip
            rig.hub.hold = None
            rig.stop_publisher()
            rig.start_publisher()
            code, output = await run(
                mcp, "git push -q --force origin HEAD:refs/heads/killed", f"{workspace}/killed"
            )
            assert code == 0, output
            assert rig.hub.refs("acme/widgets")["refs/heads/killed"] == new
    finally:
        rig.hub.hold = None
        rig.state.write_yolo(YoloState(), rig.owner)


async def test_a_publish_ticket_pushes_its_one_branch_and_nothing_else(rig: Rig) -> None:
    raw = f"python3 {rig.sprite.workspace}/raw_client.py {rig.socket}"
    shutil.copy(Path(__file__).with_name("raw_client.py"), rig.sprite.workspace / "raw_client.py")
    before = rig.hub.refs("acme/gadgets")
    async with rig.sprite.mcp() as mcp:
        line = json.dumps({"op": "publish-pr", "repo": "acme/gadgets", "title": "t"})
        _, output = await run(mcp, f"{raw} line {shlex.quote(line)}", "/")
        ticket = json.loads(output)["ticket"]
        code, output = await run(
            mcp,
            "git clone -q https://github.com/acme/gadgets ticketed && cd ticketed && git commit -q --allow-empty -m t"
            f" && ZODEX_PUBLISH_TICKET={ticket} git push origin HEAD:refs/heads/main",
            str(rig.sprite.workspace),
        )
        assert code != 0 and "publish-pr pushes exactly one new branch, refs/heads/agent/" in output, output
        code, output = await run(
            mcp, f"ZODEX_PUBLISH_TICKET={ticket} git fetch origin", f"{rig.sprite.workspace}/ticketed"
        )
        assert code != 0 and "a publish ticket is for a push" in output, output
    assert rig.hub.refs("acme/gadgets") == before
