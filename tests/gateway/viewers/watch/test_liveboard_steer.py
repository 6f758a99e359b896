"""A person types into a model's session from Liveboard (``observer.steer``): a real runtime,
a real `zodex local watch`, Debian's Chromium and a real MCP client. A password typed at a
``read -s`` prompt reaches the command and nothing else; the model is told that a person
typed, never what a hidden input was; without ``observer.steer`` there is no box and no
route; forged tokens, foreign origins and another local account are refused; a person can
take a session over, refusing the model's characters until they give it back."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.async_api import Locator, Page, expect

from tests.gateway.viewers.watch.live_support import ARTIFACTS, Watching, call, chromium, watching
from tests.support.gateway import Mcp
from tests.support.local import LocalEnv, connected, local_env, observer_bearer
from tests.support.second_user import require_second_user, run_as_second_user

pytestmark = pytest.mark.timeout(90)

WAIT_MS = 20_000  # generous: the machine is shared; every wait is on a condition
expect.set_options(timeout=WAIT_MS)
PROMPT = "read -s -p 'Password: ' p; echo \"got ${#p}\""
STEER_OFF = "typing into sessions is off; set observer.steer = true and restart Zodex Local"


@contextmanager
def running(tmp_path: Path, *, steer: bool) -> Iterator[tuple[LocalEnv, Watching]]:
    with local_env() as local:
        if steer:
            local.run("local", "config", "set", "observer.steer", "on")
        local.run("local", "start", str(tmp_path))
        with watching(local) as watch:
            yield local, watch


def command_card(page: Page, text: str) -> Locator:
    return page.locator('[data-testid="card"][data-kind="command"]').filter(has_text=text)


async def open_board(page: Page, watch: Watching) -> None:
    await page.goto(watch.url)
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")


async def start(mcp: Mcp, tmp_path: Path, cmd: str, conversation: str = "conv-steer") -> Any:
    started = await call(mcp, conversation, "exec_command", cmd=cmd, workdir=str(tmp_path), yield_time_ms=500)
    assert started["status"] == "running", started
    return started


async def poll(mcp: Mcp, handle: str, *, until: str, conversation: str = "conv-steer") -> list[Any]:
    """Poll as the model until ``until`` is in the output; every result, in order."""
    results = []
    for _ in range(20):
        result = await call(
            mcp, conversation, "write_stdin", session_handle=handle, chars="", yield_time_ms=3000
        )
        results.append(result)
        if until in "".join(r["output"] for r in results):
            return results
    raise AssertionError(f"{until!r} never came: {results}")


def observer_get(local: LocalEnv, path: str) -> httpx2.Response:
    base = local.discovery()["observability"]["base_url"]
    headers = {"Authorization": f"Bearer {observer_bearer(local)}"}
    return httpx2.get(f"{base}{path}", headers=headers, trust_env=False, timeout=30)


def every_file_holds(root: Path, secret: bytes) -> list[str]:
    """The files under ``root`` whose bytes contain ``secret`` (databases, WAL, logs, spill)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if secret in path.read_bytes():
                    found.append(str(path))
            except OSError:
                pass
    return found


async def test_a_person_answers_a_password_prompt_and_nothing_keeps_it(tmp_path: Path) -> None:
    password = "Kx7vQ2mZ"  # 8 characters, found nowhere else
    with running(tmp_path, steer=True) as (local, watch):
        async with connected(local) as mcp, chromium() as browser:
            page = await browser.new_page()
            responses: list[str] = []

            async def keep(response: Any) -> None:
                if "/api/v1/events" not in response.url:
                    responses.append(await response.text())

            page.on("response", keep)
            await open_board(page, watch)
            started = await start(mcp, tmp_path, PROMPT)
            handle = started["session_handle"]
            card = command_card(page, "read -s")
            await expect(card.get_by_test_id("output")).to_contain_text("Password:")
            box = card.get_by_test_id("steer")
            await expect(box).to_be_visible()
            await box.get_by_test_id("steer-hide").check()
            await box.get_by_test_id("steer-input").fill(password)
            await expect(box.get_by_test_id("steer-input")).to_have_attribute("type", "password")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "steer-box.png"), full_page=True)
            await box.get_by_test_id("steer-input").press("Enter")
            # The command ends at once, and its box with it: the card says what came of it.
            await expect(card.get_by_test_id("output")).to_contain_text("got 8")
            await expect(card.get_by_test_id("steer")).to_have_count(0)
            person = page.locator('[data-testid="card"][data-kind="stdin"]')
            await expect(person).to_contain_text("a person typed into")
            await expect(person.get_by_test_id("chars")).to_have_text("[a person typed 9 hidden characters]")
            await page.screenshot(path=str(ARTIFACTS / "steer-password.png"), full_page=True)

            # The model's next result tells it a person typed, and not what.
            results = await poll(mcp, handle, until="got 8")
            told = [entry for result in results for entry in result.get("human_input", [])]
            assert [(e["text"], e["hidden"]) for e in told] == [(None, True)], results
            assert told[0]["at"].endswith("Z")
            assert "got 8" in "".join(r["output"] for r in results)
            # Told once: a later result carries no human_input.
            again = await call(mcp, "conv-steer", "write_stdin", session_handle=handle, chars="")
            assert "human_input" not in again

            # History: the input, by a person, as a count only.
            timeline = observer_get(local, "/v1/timeline").json()["records"]
            typed = [r for r in timeline if r["kind"] == "stdin"]
            assert [(r["by"], r["chars"], r["session_handle"]) for r in typed] == [
                ("person", "[a person typed 9 hidden characters]", handle)
            ]
            command = next(r for r in timeline if r["kind"] == "command")
            assert command["by"] == "model" and typed[0]["agent_id"] == command["agent_id"]
            detail = observer_get(local, f"/v1/invocations/{typed[0]['presentation_id']}").json()
            assert detail["by"] == "person"
            assert detail["result"]["human_input"]["hidden"] is True
            assert detail["result"]["human_input"]["text"] is None
            history = local.run("local", "history", "--format", "json", "--raw").stdout
            assert "a person typed 9 hidden characters" in history

            # The characters are nowhere: no file of the runtime (history, WAL, logs, spill),
            # no observer response, nothing the page got, no model result, no viewer output.
            observed = [
                observer_get(local, path).text
                for path in (
                    "/v1/timeline",
                    "/v1/invocations",
                    f"/v1/invocations/{command['presentation_id']}",
                    f"/v1/invocations/{command['presentation_id']}/output",
                    f"/v1/invocations/{command['presentation_id']}/output?view=display",
                )
            ]
            assert every_file_holds(local.root, password.encode()) == []
            for text in (*observed, *responses, history, json.dumps([started, *results, again])):
                assert password not in text
            assert password not in await page.content()
            code, stderr = watch.stop()
            assert code == 0 and password not in stderr


async def test_echoed_input_is_told_keys_work_and_a_person_can_take_over(tmp_path: Path) -> None:
    with running(tmp_path, steer=True) as (local, watch):
        async with connected(local) as mcp, chromium() as browser:
            page = await browser.new_page()
            await open_board(page, watch)
            started = await start(mcp, tmp_path, 'while read -r line; do echo "line=$line"; done')
            handle = started["session_handle"]
            card = command_card(page, "while read")
            box = card.get_by_test_id("steer")
            status = box.get_by_test_id("steer-status")
            await box.get_by_test_id("steer-input").fill("hello there")
            await box.get_by_test_id("steer-send").click()
            await expect(status).to_have_text("typed 12 characters")
            await expect(box.get_by_test_id("steer-input")).to_have_value("")
            await expect(card.get_by_test_id("output")).to_contain_text("line=hello there")
            results = await poll(mcp, handle, until="line=hello there")
            told = [entry for result in results for entry in result.get("human_input", [])]
            assert [(e["text"], e["hidden"]) for e in told] == [("hello there\r", False)]

            # Taken over: the model's characters are refused, its polls still answer.
            await box.get_by_test_id("steer-take").click()
            await expect(status).to_have_text("taken over: the model can only watch")
            await expect(box.get_by_test_id("steer-take")).to_have_text("Give back")
            refused = await mcp.client.call_tool(
                "write_stdin", {"session_handle": handle, "chars": "from the model\r"},
                meta={"openai/session": "conv-steer"},
            )  # fmt: skip
            assert refused.is_error
            assert refused.content[0].text == (
                f"a person has taken over session {handle}; poll it to watch (no characters)"
            )
            await box.get_by_test_id("steer-input").fill("by hand")
            await box.get_by_test_id("steer-input").press("Enter")
            watched = await poll(mcp, handle, until="line=by hand")
            assert all(r["taken_over"] is True for r in watched), watched
            assert "from the model" not in json.dumps(watched)
            await box.get_by_test_id("steer-take").click()
            await expect(status).to_have_text("given back to the model")
            back = await call(
                mcp,
                "conv-steer",
                "write_stdin",
                session_handle=handle,
                chars="model again\r",
                yield_time_ms=2000,
            )
            assert back["taken_over"] is False, back
            await expect(card.get_by_test_id("output")).to_contain_text("line=model again")
            assert "line=from the model" not in await card.get_by_test_id("output").text_content()

            # Ctrl-C from its button ends the command; the model sees it end.
            await box.get_by_test_id("steer-key").and_(page.locator('[data-key="ctrl-c"]')).click()
            await expect(card).to_have_attribute("data-status", "exited")
            await expect(card.get_by_test_id("steer")).to_have_count(0)  # no box once it ended
            ended = await call(
                mcp, "conv-steer", "write_stdin", session_handle=handle, chars="", yield_time_ms=3000
            )
            assert ended["status"] == "exited" and ended["signal"] == "SIGINT", ended
            assert [(e["text"], e["hidden"]) for e in ended["human_input"]] == [("\x03", False)]
            records = observer_get(local, "/v1/timeline").json()["records"]
            typed = sorted((r["chars"], r["by"]) for r in records if r["kind"] == "stdin")
            assert typed == [
                ("\x03", "person"),
                ("by hand\r", "person"),
                ("hello there\r", "person"),
                ("model again\r", "model"),
            ]


async def test_without_steer_there_is_no_box_and_no_route(tmp_path: Path) -> None:
    with running(tmp_path, steer=False) as (local, watch):
        observability = local.discovery()["observability"]
        assert "steer_token_path" not in observability
        assert not (Path(observability["bearer_token_path"]).parent / "observer-steer").exists()
        async with connected(local) as mcp, chromium() as browser:
            page = await browser.new_page()
            await open_board(page, watch)
            started = await start(mcp, tmp_path, "cat")
            card = command_card(page, "cat")
            await expect(card).to_have_attribute("data-status", "running")
            await expect(card.get_by_test_id("steer")).to_have_count(0)
            assert observer_get(local, "/v1/status").json()["steer"] is False
            origin = f"http://127.0.0.1:{watch.port}"
            path = f"api/v1/sessions/{started['session_handle']}/input"
            async with httpx2.AsyncClient(base_url=watch.url, trust_env=False, timeout=30) as client:
                refused = await client.post(path, json={"chars": "typed\r"}, headers={"Origin": origin})
                assert (refused.status_code, refused.json()["error"]) == (403, STEER_OFF)
            base = observability["base_url"]
            direct = httpx2.post(
                f"{base}/v1/sessions/{started['session_handle']}/input",
                json={"chars": "typed\r"},
                headers={"Authorization": f"Bearer {observer_bearer(local)}"},
                trust_env=False,
            )
            assert (direct.status_code, direct.json()["error"]) == (403, STEER_OFF)
            quiet = await call(mcp, "conv-steer", "write_stdin", session_handle=started["session_handle"])
            assert quiet["output"] == "" and "human_input" not in quiet


async def test_forged_tokens_foreign_origins_and_other_accounts_are_refused(tmp_path: Path) -> None:
    require_second_user()
    with running(tmp_path, steer=True) as (local, watch):
        observability = local.discovery()["observability"]
        steer_file = Path(observability["steer_token_path"])
        assert steer_file.stat().st_mode & 0o777 == 0o600
        steer_token = steer_file.read_text().strip()
        async with connected(local) as mcp:
            started = await start(mcp, tmp_path, "cat")
            handle = started["session_handle"]
            base = observability["base_url"]
            route = f"{base}/v1/sessions/{handle}/input"
            with httpx2.Client(trust_env=False, timeout=30) as client:
                for authorization in (
                    {"Authorization": f"Bearer {observer_bearer(local)}"},
                    {"Authorization": f"Bearer {secrets.token_hex(32)}"},
                    {"Authorization": "Basic eDp4"},
                    {},
                ):
                    forged = client.post(route, json={"chars": "x"}, headers=authorization)
                    assert forged.status_code == 401, authorization
                # The steer token opens that route only: it reads nothing.
                reading = client.get(f"{base}/v1/status", headers={"Authorization": f"Bearer {steer_token}"})
                assert reading.status_code == 401

            origin = f"http://127.0.0.1:{watch.port}"
            path = f"api/v1/sessions/{handle}/input"
            async with httpx2.AsyncClient(base_url=watch.url, trust_env=False, timeout=30) as client:
                for headers in ({}, {"Origin": "http://evil.example"}, {"Origin": "null"}):
                    foreign = await client.post(path, json={"chars": "x"}, headers=headers)
                    assert foreign.status_code == 403, headers
                form = await client.post(path, content=b"chars=x", headers={"Origin": origin})
                assert form.status_code == 415
                elsewhere = await client.post(
                    f"{origin}/{watch.secret[::-1]}/{path}", json={"chars": "x"}, headers={"Origin": origin}
                )
                assert elsewhere.status_code == 404
                rebinding = await client.post(
                    path,
                    json={"chars": "x"},
                    headers={"Origin": origin, "Host": f"evil.example:{watch.port}"},
                )
                assert rebinding.status_code == 421
                for body, status in (
                    ({"chars": ""}, 400),
                    ({"chars": 3}, 400),
                    ({"chars": "x", "more": 1}, 400),
                    ({"text": "x"}, 400),
                ):
                    bad = await client.post(path, json=body, headers={"Origin": origin})
                    assert bad.status_code == status, (body, bad.text)
                unknown = await client.post(
                    "api/v1/sessions/w0000-1-zzzzzzzz/input", json={"chars": "x"}, headers={"Origin": origin}
                )
                assert unknown.status_code == 404, unknown.text

                # Another account of this machine, with the secret URL and the right Origin,
                # is refused by who it is; it cannot read the steer token either.
                stranger = run_as_second_user(
                    [
                        "curl", "-s", "-w", "\\n%{http_code}",
                        "-H", "Content-Type: application/json", "-H", f"Origin: {origin}",
                        "--data", '{"chars": "stranger\\r"}', f"{watch.url}{path}",
                    ]
                )  # fmt: skip
                body, _, status_code = stranger.stdout.rpartition("\n")
                assert status_code == "403", stranger
                assert (
                    json.loads(body)["error"]
                    == "only the account running Zodex Local may type into its sessions"
                )
                peek = run_as_second_user(["cat", str(steer_file)])
                assert peek.returncode != 0 and steer_token not in peek.stdout

                # None of that reached the command; the same request from this account does.
                quiet = await call(mcp, "conv-steer", "write_stdin", session_handle=handle, yield_time_ms=500)
                assert quiet["output"] == "" and "human_input" not in quiet
                typed = await client.post(path, json={"chars": "mine\r"}, headers={"Origin": origin})
                assert typed.status_code == 200, typed.text
                assert typed.json()["hidden"] is False and typed.json()["chars"] == 5
                assert "mine" not in typed.text  # the reply never echoes the characters
                heard = await poll(mcp, handle, until="mine")
                assert [e["text"] for r in heard for e in r.get("human_input", [])] == ["mine\r"]
                # A session that has ended takes nothing.
                await call(mcp, "conv-steer", "write_stdin", session_handle=handle, kill_process=True)
                ended = await client.post(path, json={"chars": "late\r"}, headers={"Origin": origin})
                assert ended.status_code == 409, ended.text
