"""What the publisher accepts from the agent (docs/github.md#what-the-publisher-accepts):
repo names, refs and remote URLs, checked against git's own rules where git has them."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zodex_gateway.sprite.github.names import InputError, check_ref, check_repo, repo_from_remote


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/acme/widgets",
        "https://github.com/acme/widgets.git",
        "https://github.com/acme/widgets/",
        "https://www.github.com/acme/widgets",
        "ssh://git@github.com/acme/widgets.git",
        "git@github.com:acme/widgets.git",
        "git@github.com:acme/widgets",
        "zodex::https://github.com/acme/widgets",
    ],
)
def test_every_github_remote_form_names_the_repo(url: str) -> None:
    assert repo_from_remote(url) == "acme/widgets"


@pytest.mark.parametrize(
    "url",
    [
        "https://gitlab.com/acme/widgets",
        "https://github.com.evil.example/acme/widgets",
        "https://token:x@github.com/acme/widgets",
        "http://github.com/acme/widgets",
        "file:///srv/acme/widgets",
        "ext::sh -c touch% /tmp/x",
        "https://github.com/acme/widgets/extra",
        "https://github.com/acme/../widgets",
        "https://github.com/acme",
        "git@github.com:/acme/../../etc",
        "/home/agent/widgets",
        "",
    ],
)
def test_anything_else_is_no_repo(url: str) -> None:
    assert repo_from_remote(url) is None


@pytest.mark.parametrize(
    "repo",
    [
        "acme",
        "acme/",
        "/widgets",
        "acme/widgets/x",
        "-acme/w",
        "ac--me/w",
        "acme/..",
        "acme/w.git",
        "a" * 40 + "/w",
    ],
)
def test_malformed_repo_names_are_refused(repo: str) -> None:
    with pytest.raises(InputError, match="repo must be in owner/repo form"):
        check_repo(repo)


@pytest.mark.parametrize(
    "ref", ["refs/heads/../x", "refs/heads/a\\b", "refs/heads/x/", "HEAD", "refs/x", "refs/heads/a..b",
            "refs/heads/.hidden", "refs/heads/x.lock", "refs/heads/a@{1}", "refs/heads/a b", "refs/heads/a~1"],
)  # fmt: skip
def test_bad_refs_are_refused(ref: str) -> None:
    with pytest.raises(InputError):
        check_ref(ref)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=30))
def test_a_ref_accepted_here_is_one_git_accepts(tail: str) -> None:
    ref = f"refs/heads/{tail}"
    try:
        check_ref(ref)
    except InputError:
        return
    done = subprocess.run(["git", "check-ref-format", ref], capture_output=True, check=False)
    assert done.returncode == 0, ref
