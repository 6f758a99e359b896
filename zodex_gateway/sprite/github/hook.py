"""The pre-receive hook of a mirror (docs/github.md#the-relay): runs as the publisher when the
agent pushes, applies the mode, and pushes the agent's updates to GitHub itself before
``git receive-pack`` accepts them — so the agent sees either GitHub's acceptance or its
refusal, and the mirror never holds a ref GitHub does not.

``receive-pack`` runs it with the publisher's environment (``ZODEX_PUBLISHER_DIR``,
``ZODEX_PUSH_REPO``; for publish-pr ``ZODEX_PUSH_ONLY``; ``ZODEX_PUSH_KIND`` and
``ZODEX_PUSH_AUTH``, the path of the token file the publisher made for the mode it saw:
none of them secret) and with
the pushed objects still in quarantine, which the ``git push`` below reads through the
quarantine's own environment variables.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from .errors import GitHubError
from .names import InputError, check_object_id, check_ref
from .relay import GIT, authenticated
from .state import PublisherDir, StateError

ZERO: Final = "0" * 40
MAX_UPDATES: Final = 1000


class Refused(Exception):
    pass


def read_updates(lines: list[str]) -> list[tuple[str, str, str]]:
    if len(lines) > MAX_UPDATES:
        raise Refused(f"too many ref updates in one push ({len(lines)} > {MAX_UPDATES})")
    updates = []
    for line in lines:
        old, new, ref = line.rstrip("\n").split(" ", 2)
        updates.append((check_object_id(old), check_object_id(new), check_ref(ref)))
    return updates


def default_refusal(repo: str) -> str:
    return (
        f"GitHub push to {repo} refused: direct push is not enabled (default mode: clone and fetch only). "
        f"Open a pull request with `zodex-agent github publish-pr --repo {repo} --title …`, "
        f"or ask for push with `zodex-agent github request-push --repo {repo}`"
    )


def mode_credential(directory: PublisherDir, repo: str, now: float) -> tuple[str, str | None]:
    """Which token the mode gives a push to ``repo``: ``("writer", None)`` (YOLO: the writer
    App's, minted when needed) or ``("grant", <user token>)``; else Refused with the mode's
    message. The publisher asks it before receive-pack runs, this hook again after."""
    yolo = directory.yolo()
    refusal = yolo.refusal(repo, now)
    if refusal is None:
        return "writer", None
    grant = directory.grant(repo, now)
    if grant is not None:
        return "grant", grant.token
    if any(g.repo == repo for g in directory.grants()):
        raise Refused(
            f"GitHub push grant for {repo} has expired; ask again with `zodex-agent github request-push --repo {repo}`"
        )
    raise Refused(refusal if yolo.active() else default_refusal(repo))


def choose(directory: PublisherDir, repo: str, updates: list[tuple[str, str, str]]) -> tuple[str, str | None]:
    only = os.environ.get("ZODEX_PUSH_ONLY")
    if only:
        if len(updates) != 1 or updates[0][2] != only or updates[0][0] != ZERO or updates[0][1] == ZERO:
            raise Refused(f"publish-pr pushes exactly one new branch, {only}")
        return "writer", None
    return mode_credential(directory, repo, time.time())


def mint_writer(directory: PublisherDir, repo: str) -> str:
    # Imported here: most pushes come with the publisher's token and need no GitHub call.
    from .api import GitHubApi
    from .credentials import Credentials

    settings = directory.settings()
    api = GitHubApi(settings.api_url, settings.web_url, directory.ca_file)
    return Credentials(directory, settings, api).writer(repo)


def push(
    directory: PublisherDir, web_url: str, config: Path, repo: str, updates: list[tuple[str, str, str]]
) -> None:
    """``config`` is the git config file carrying the token (relay.authenticated)."""
    leases = [f"--force-with-lease={ref}:{'' if old == ZERO else old}" for old, _, ref in updates]
    specs = [f":{ref}" if new == ZERO else f"+{new}:{ref}" for _, new, ref in updates]
    # The quarantine's GIT_* variables let this push read the objects just received.
    env = {key: value for key, value in os.environ.items() if key.startswith("GIT_") and "CONFIG" not in key}
    env.update({"PATH": "/usr/bin:/bin", "HOME": str(directory.path), "LANG": "C", "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_GLOBAL": str(config)})  # fmt: skip
    done = subprocess.run(
        [GIT, "push", "--atomic", "--quiet", "--no-verify", *leases, f"{web_url}/{repo}.git", *specs],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()][-6:]
        raise Refused("GitHub refused the push: " + " / ".join(lines))


def main() -> int:
    try:
        directory = PublisherDir(Path(os.environ["ZODEX_PUBLISHER_DIR"]))
        repo = os.environ["ZODEX_PUSH_REPO"]
        web_url = directory.settings().web_url
        updates = read_updates(sys.stdin.readlines())
        kind, token = choose(directory, repo, updates)
        preset = os.environ.get("ZODEX_PUSH_AUTH") if os.environ.get("ZODEX_PUSH_KIND") == kind else None
        if preset:
            push(directory, web_url, Path(preset), repo, updates)
        else:
            token = token or mint_writer(directory, repo)
            with authenticated(directory.scratch, web_url, token, directory.ca_file) as config:
                push(directory, web_url, config, repo, updates)
    except (Refused, InputError, StateError, GitHubError) as exc:
        print(f"zodex: {exc}", file=sys.stderr)
        return 1
    except (KeyError, ValueError) as exc:
        print(f"zodex: push refused: malformed update ({type(exc).__name__})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
