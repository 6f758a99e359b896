"""The GitHub stand-in holds to GitHub's rules: App JWTs verified against the App's key,
installation tokens no wider than asked, git over smart HTTP refusing a read-only push."""

from __future__ import annotations

import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import jwt
import pytest

from tests.support.github_standin import GitHub, github_standin, new_private_key_pem

# The machine's GIT_SSL_CAINFO would win over http.sslCAInfo.
CLEAN = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[GitHub]:
    with github_standin(tmp_path / "hub") as running:
        running.add_repo("acme/widgets")
        reader = running.add_app(11, "reader", {"contents": "read", "metadata": "read"})
        running.install(reader, 111, "acme", {"acme/widgets"})
        yield running


def app_jwt(hub: GitHub, app_id: int, key: bytes | None = None, lifetime: int = 540) -> str:
    now = int(time.time())
    claims = {"iat": now - 60, "exp": now + lifetime, "iss": str(app_id)}
    return jwt.encode(claims, key or hub.apps[app_id].private_key, algorithm="RS256")


def client(hub: GitHub) -> httpx2.Client:
    return httpx2.Client(
        base_url=hub.url, verify=ssl.create_default_context(cafile=str(hub.ca_file)), timeout=30
    )


def test_app_jwt_is_checked_against_the_apps_public_key(hub: GitHub) -> None:
    with client(hub) as http:
        assert http.get("/app", headers={"Authorization": f"Bearer {app_jwt(hub, 11)}"}).json()["id"] == 11
        forged = app_jwt(hub, 11, key=new_private_key_pem())
        assert http.get("/app", headers={"Authorization": f"Bearer {forged}"}).status_code == 401
        too_long = app_jwt(hub, 11, lifetime=3600)
        assert http.get("/app", headers={"Authorization": f"Bearer {too_long}"}).status_code == 401


def token(hub: GitHub, permissions: dict[str, str] | None = None) -> httpx2.Response:
    with client(hub) as http:
        return http.post(
            "/app/installations/111/access_tokens",
            headers={"Authorization": f"Bearer {app_jwt(hub, 11)}"},
            json={"permissions": permissions} if permissions else {},
        )


def test_installation_tokens_carry_no_more_than_the_installation(hub: GitHub) -> None:
    made = token(hub, {"contents": "read"})
    assert made.status_code == 201 and made.json()["token"].startswith("ghs_")
    assert made.json()["permissions"] == {"contents": "read"}
    assert token(hub, {"contents": "write"}).status_code == 422


def test_git_clones_with_the_token_and_a_read_only_push_is_refused(hub: GitHub, tmp_path: Path) -> None:
    value = token(hub, {"contents": "read"}).json()["token"]
    ca = ["-c", f"http.sslCAInfo={hub.ca_file}"]
    url = hub.url.replace("https://", f"https://x-access-token:{value}@") + "/acme/widgets.git"
    work = tmp_path / "work"
    subprocess.run(["git", *ca, "clone", "-q", url, str(work)], check=True, capture_output=True, env=CLEAN)
    assert (work / "README.md").read_text() == "# acme/widgets\n"
    pushed = subprocess.run(
        ["git", *ca, "-C", str(work), "push", "origin", "HEAD:refs/heads/x"],
        capture_output=True,
        text=True,
        env=CLEAN,
    )
    assert pushed.returncode != 0 and "403" in pushed.stderr
    assert "refs/heads/x" not in hub.refs("acme/widgets")
    anonymous = subprocess.run(
        ["git", *ca, "ls-remote", hub.url + "/acme/widgets.git"],
        capture_output=True, text=True, env={**CLEAN, "GIT_TERMINAL_PROMPT": "0"},
    )  # fmt: skip
    assert anonymous.returncode != 0
