"""The publisher (docs/github.md#the-model): the one process that holds the Apps' keys
and GitHub tokens, running as its own account, serving the agent over a Unix socket.

Every connection's peer is checked with ``SO_PEERCRED``: only the agent accounts of the
settings are served. Every field of a request is untrusted input (``names``), and one bad
field is one clear error with nothing done.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import socket
import socketserver
import string
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .api import GitHubApi, GitHubError
from .credentials import Credentials
from .grant_desk import GrantDesk
from .hook import Refused, mode_credential
from .names import (
    InputError,
    check_pr_text,
    check_ref,
    check_repo,
    repo_from_remote,
    sanitize_branch_prefix,
)
from .relay import GIT, RelayError, authenticated, git_env, mirror_lock, refresh, run_git
from .serving import Refusal, log, text_field
from .state import PublisherDir, PublisherSettings, StateError
from .wire import WireError, read_line, send_line

__all__ = ["Publisher", "main"]

SERVICES: Final = ("git-upload-pack", "git-receive-pack")
TICKET_LIFETIME: Final = 900
SESSION_TIMEOUT: Final = 3600
# A request line must arrive within this; a connection that never sends one holds nothing.
REQUEST_TIMEOUT: Final = 30.0
# Connections served at once; more wait for none and are refused.
MAX_CONNECTIONS: Final = 16
HOOK: Final = """#!/bin/sh
# Written by the Zodex publisher at start: the mode check and the push to GitHub.
exec {python} -I -m zodex_gateway.sprite.github.hook
"""


@dataclass
class Ticket:
    uid: int
    repo: str
    branch: str
    base: str
    title: str
    body: str
    draft: bool
    expires: float
    pushed: bool = False


def peer_uid(conn: socket.socket) -> int:
    _pid, uid, _gid = struct.unpack(
        "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    )
    return int(uid)


class Publisher:
    def __init__(self, directory: PublisherDir) -> None:
        self.dir = directory
        self.settings: PublisherSettings = directory.settings()
        self.api = GitHubApi(self.settings.api_url, self.settings.web_url, directory.ca_file)
        self.credentials = Credentials(directory, self.settings, self.api)
        self.tickets: dict[str, Ticket] = {}
        self.grants = GrantDesk(directory, self.settings, self.api, self.credentials)
        self.lock = threading.Lock()
        self.handlers: dict[str, Callable[[socket.socket, int, dict[str, Any]], dict[str, Any] | None]] = {
            "git": self.git,
            "publish-pr": self.publish_pr,
            "open-pr": self.open_pr,
            "request-push": self.grants.request_push,
            "list-grants": self.grants.list_grants,
            "revoke-push": self.grants.revoke_push,
        }
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        directory.hooks.mkdir(mode=0o700, exist_ok=True)
        hook = directory.hooks / "pre-receive"
        hook.write_text(HOOK.format(python=sys.executable))
        hook.chmod(0o700)

    def handle(self, conn: socket.socket) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                send_line(
                    conn,
                    {
                        "ok": False,
                        "error": f"the publisher is serving {MAX_CONNECTIONS} connections; try again",
                    },
                )
            except OSError:
                pass
            return
        try:
            self._handle(conn)
        finally:
            self.slots.release()

    def _handle(self, conn: socket.socket) -> None:
        uid = peer_uid(conn)
        try:
            if uid not in self.settings.agent_uids:
                raise Refusal(f"uid {uid} may not use the Zodex publisher")
            conn.settimeout(REQUEST_TIMEOUT)
            try:
                request = read_line(conn)
            except TimeoutError:
                raise Refusal(f"no request line within {REQUEST_TIMEOUT:.0f} s") from None
            conn.settimeout(None)
            op = request.get("op")
            handler = self.handlers.get(op) if isinstance(op, str) else None
            if handler is None:
                raise Refusal(f"unknown op {str(op)[:40]!r}")
            answer = handler(conn, uid, request)
            if answer is not None:
                send_line(conn, {"ok": True, **answer})
        except (Refusal, InputError, WireError, GitHubError, RelayError, StateError) as exc:
            log(f"uid {uid}: refused: {exc}")
            try:
                send_line(conn, {"ok": False, "error": str(exc)})
            except OSError:
                pass

    # --- git through a mirror --------------------------------------------------------------

    def git(self, conn: socket.socket, uid: int, request: dict[str, Any]) -> None:
        service = text_field(request, "service")
        if service not in SERVICES:
            raise Refusal(f"unsupported git service {service[:40]!r}")
        url = text_field(request, "url")
        repo = repo_from_remote(url)
        if repo is None:
            raise Refusal(f"not a github.com repository URL: {url[:200]!r}")
        only = self._ticket_branch(uid, repo, request, service)
        with mirror_lock(self.dir.mirrors, repo) as mirror:
            self._refresh(mirror, repo)
            send_line(conn, {"ok": True, "repo": repo, "max_push_bytes": self.settings.max_push_bytes})
            env = git_env(self.dir.path)
            if service == "git-upload-pack":
                argv = [GIT, "upload-pack", "--strict", str(mirror)]
            else:
                argv = [GIT, "-c", f"core.hooksPath={self.dir.hooks}",
                        "-c", f"receive.maxInputSize={self.settings.max_push_bytes}",
                        "-c", "receive.fsckObjects=true", "-c", "receive.denyDeleteCurrent=false",
                        "receive-pack", str(mirror)]  # fmt: skip
                env |= {"ZODEX_PUBLISHER_DIR": str(self.dir.path), "ZODEX_PUSH_REPO": repo}
                if only:
                    env["ZODEX_PUSH_ONLY"] = f"refs/heads/{only.branch}"
            started = time.monotonic()
            with contextlib.ExitStack() as stack:
                if service == "git-receive-pack":
                    env |= self._push_credential(stack, repo, only is not None)
                process = subprocess.Popen(
                    argv, stdin=conn.fileno(), stdout=conn.fileno(), stderr=subprocess.PIPE, env=env
                )
                try:
                    _, stderr = process.communicate(timeout=SESSION_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    _, stderr = process.communicate()
            took = time.monotonic() - started
            log(f"uid {uid}: {service} {repo}: exit {process.returncode} in {took:.2f}s")
            if stderr.strip():
                log(f"uid {uid}: {service} {repo}: {stderr.decode(errors='replace').strip()[-500:]}")
            if only is not None and process.returncode == 0:
                refs = run_git(
                    ["--git-dir", str(mirror), "for-each-ref", f"refs/heads/{only.branch}"], self.dir.path
                )
                only.pushed = bool(refs.strip())

    def _push_credential(self, stack: contextlib.ExitStack, repo: str, ticket: bool) -> dict[str, str]:
        """The token file for the mode as it stands, made before the agent's objects arrive
        so the hook calls GitHub only to push; none when the mode refuses (the hook says
        why) or minting fails (the hook tries again and reports GitHub's error)."""
        try:
            kind, token = ("writer", None) if ticket else mode_credential(self.dir, repo, time.time())
            token = token or self.credentials.writer(repo)
        except (Refused, StateError, GitHubError):
            return {}
        path = stack.enter_context(
            authenticated(self.dir.scratch, self.settings.web_url, token, self.dir.ca_file)
        )
        return {"ZODEX_PUSH_KIND": kind, "ZODEX_PUSH_AUTH": str(path)}

    def _refresh(self, mirror: Path, repo: str) -> None:
        token = self.credentials.reader()
        try:
            default_branch = str(self.api.repo(token, repo)["default_branch"])
        except GitHubError as exc:
            raise Refusal(f"repository {repo} is not reachable with the reader App: {exc}") from None
        check_ref(f"refs/heads/{default_branch}")
        with authenticated(self.dir.scratch, self.settings.web_url, token, self.dir.ca_file) as config:
            refresh(mirror, self.dir.path, config, f"{self.settings.web_url}/{repo}.git", default_branch)

    def _ticket_branch(self, uid: int, repo: str, request: dict[str, Any], service: str) -> Ticket | None:
        if "ticket" not in request:
            return None
        if service != "git-receive-pack":
            raise Refusal("a publish ticket is for a push")
        ticket = self._ticket(uid, text_field(request, "ticket"))
        if ticket.repo != repo:
            raise Refusal(f"the publish ticket is for {ticket.repo}, not {repo}")
        return ticket

    def _ticket(self, uid: int, value: str) -> Ticket:
        with self.lock:
            now = time.time()
            for stale in [key for key, ticket in self.tickets.items() if ticket.expires <= now]:
                del self.tickets[stale]
            ticket = self.tickets.get(value)
        if ticket is None or ticket.uid != uid:
            raise Refusal("the publish ticket is unknown or expired; run publish-pr again")
        return ticket

    # --- publish-pr ----------------------------------------------------------------------------

    def publish_pr(self, conn: socket.socket, uid: int, request: dict[str, Any]) -> dict[str, Any]:
        repo = check_repo(text_field(request, "repo"))
        title = text_field(request, "title")
        body = text_field(request, "body", "")
        base = text_field(request, "base", "") or self.settings.default_base
        draft = request.get("draft", False)
        check_pr_text(title, body)
        if not isinstance(draft, bool):
            raise Refusal("draft must be true or false")
        check_ref(f"refs/heads/{base}")
        try:
            self.credentials.writer(repo)
        except GitHubError as exc:
            raise Refusal(f"repo is not covered by the writer App's installation: {repo} ({exc})") from None
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
        branch = f"{sanitize_branch_prefix(self.settings.branch_prefix)}/{int(time.time())}-{suffix}"
        value = secrets.token_urlsafe(24)
        with self.lock:
            self.tickets[value] = Ticket(
                uid, repo, branch, base, title, body, draft, time.time() + TICKET_LIFETIME
            )
        log(f"uid {uid}: publish-pr {repo}: branch {branch}")
        return {"ticket": value, "repo": repo, "branch": branch, "base": base}

    def open_pr(self, conn: socket.socket, uid: int, request: dict[str, Any]) -> dict[str, Any]:
        value = text_field(request, "ticket")
        ticket = self._ticket(uid, value)
        if not ticket.pushed:
            raise Refusal(f"branch {ticket.branch} was not pushed; run publish-pr again")
        with self.lock:
            self.tickets.pop(value, None)
        pull = self.api.create_pull(
            self.credentials.writer(ticket.repo),
            ticket.repo,
            head=ticket.branch,
            base=ticket.base,
            title=ticket.title,
            body=ticket.body,
            draft=ticket.draft,
        )
        log(f"uid {uid}: publish-pr {ticket.repo}: pull #{pull.get('number')}")
        return {
            "repo": ticket.repo,
            "url": str(pull.get("html_url", "")),
            "number": int(pull.get("number", 0)),
            "branch": ticket.branch,
            "base": ticket.base,
            "draft": bool(pull.get("draft", ticket.draft)),
        }


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    publisher: Publisher


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        server.publisher.handle(self.request)


def serve(directory: Path, socket_path: Path, ready: Callable[[], None] | None = None) -> None:
    publisher = Publisher(PublisherDir(directory))
    socket_path.unlink(missing_ok=True)
    server = _Server(str(socket_path), _Handler)
    server.publisher = publisher
    # Anyone may connect; SO_PEERCRED decides who is served.
    os.chmod(socket_path, 0o666)
    log(f"listening on {socket_path}")
    threading.Thread(target=publisher.grants.sweep_forever, args=(threading.Event(),), daemon=True).start()
    if ready is not None:
        ready()
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zodex-publisher", description="The Zodex GitHub publisher.")
    parser.add_argument("--dir", type=Path, required=True, help="the publisher's 0700 directory")
    parser.add_argument("--socket", type=Path, required=True, help="the Unix socket the agent connects to")
    args = parser.parse_args(argv)
    os.umask(0o077)
    try:
        serve(args.dir, args.socket)
    except (StateError, OSError) as exc:
        log(f"cannot start: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
