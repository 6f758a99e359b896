"""Sprite's front door (docs/sprite.md#the-service): ``GET /health`` open, ``/mcp`` and
``/mcp/`` with the key, nothing else.

- The key comes as ``?key=<key>`` (what ChatGPT connectors send) or ``Authorization: Bearer
  <key>``, compared in constant time. Anything else — no key, a wrong one, two different
  ones in any two places (two parameters, two ``Authorization`` headers, an
  ``Authorization`` of another scheme beside the key), the key in another header or a form
  field — is 401 with an empty body, on every path but ``/health``: a scanner learns
  nothing, not even which paths exist.
- Any Host is accepted unless ``sprite.allowed-hosts`` is set; then the Host header must be
  one of them (a name alone allows any port), else 421 with an empty body.
- The key is the file's: its metadata is looked at on each request (one ``stat``), so a key
  written by ``zodex sprite rotate-key`` is in force for the next request, with no restart.
  A key file that becomes unusable refuses every request until it is fixed.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from pathlib import Path

from starlette.types import Receive, Scope, Send

from zodex_gateway.serve.mcp_http import McpHttpApp
from zodex_gateway.sprite.key import KeyRefused, read_key
from zodex_gateway.web import guard

log = logging.getLogger("zodex.sprite")

COMPONENT = "zodex-sprite"
MCP_PATHS = ("/mcp", "/mcp/")


class KeySource:
    """The key in force: the key file's, read again whenever the file changes."""

    def __init__(self, path: Path, key: str, owner_uid: int | None = None) -> None:
        self._path = path
        self._owner_uid = owner_uid
        self._key: str | None = key
        self._seen = self._identity()

    def _identity(self) -> tuple[int, int, int, int] | None:
        try:
            info = os.stat(self._path, follow_symlinks=False)
        except OSError:
            return None
        return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def current(self) -> str | None:
        identity = self._identity()
        if identity != self._seen:
            self._seen = identity
            try:
                self._key = read_key(self._path, self._owner_uid)
                log.info("the key file changed; the new key is in force")
            except KeyRefused as exc:
                self._key = None
                log.error("every request is refused until the key is fixed: %s", exc)
        return self._key


def query_keys(scope: Scope) -> list[str]:
    """Every ``key`` parameter of the query string, in order."""
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    return urllib.parse.parse_qs(query, keep_blank_values=True).get("key", [])


def authorization_keys(scope: Scope) -> list[str]:
    """What every ``Authorization`` header gives as a key: a Bearer header its token, any
    other the whole value (which is never the key, so it refuses the request with any key)."""
    values = guard.header_values(scope, b"authorization")
    return [guard.bearer_token(value) or value for value in values]


def _without_key(scope: Scope) -> Scope:
    """The scope without ``key`` in its query: the MCP app never sees the key."""
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    kept = [(k, v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True) if k != "key"]
    return {**scope, "query_string": urllib.parse.urlencode(kept).encode("latin-1")}


class SpriteFront:
    def __init__(
        self, mcp: McpHttpApp, keys: KeySource, *, allowed_hosts: tuple[str, ...], version: str
    ) -> None:
        self._mcp = mcp
        self._keys = keys
        self._allowed_hosts = allowed_hosts
        self._health = json.dumps({"status": "ok", "component": COMPONENT, "version": version}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._mcp(scope, receive, send)  # the lifespan
            return
        if not self._host_allowed(scope):
            await _empty(send, 421)
            return
        path = scope["path"]
        if path == "/health" and scope["method"] in ("GET", "HEAD"):
            await _body(send, 200, self._health, scope["method"] == "HEAD")
            return
        # Without the key every other request is 401, whatever its path or method: a
        # scanner cannot even tell which paths exist.
        if not self._key_ok(scope):
            await _empty(send, 401)
            return
        if path not in MCP_PATHS:
            await _empty(send, 404)
            return
        admitted = {**_without_key(scope), "path": "/mcp", "raw_path": b"/mcp"}
        await self._mcp(admitted, receive, send)

    def _key_ok(self, scope: Scope) -> bool:
        expected = self._keys.current()
        if expected is None:
            return False
        given = set(query_keys(scope)) | set(authorization_keys(scope))
        # Two different keys in one request (two ``key`` parameters, two Authorization
        # headers, one of each) are refused, whichever one is right.
        if len(given) != 1:
            return False
        return guard.secret_matches(given.pop(), expected)

    def _host_allowed(self, scope: Scope) -> bool:
        if not self._allowed_hosts:
            return True
        given = (guard.header(scope, b"host") or "").strip().lower()
        name = given.rsplit(":", 1)[0] if not given.endswith("]") else given
        return given in self._allowed_hosts or name in self._allowed_hosts


async def _empty(send: Send, status: int) -> None:
    await _body(send, status, b"", False)


async def _body(send: Send, status: int, body: bytes, head: bool) -> None:
    headers = [(b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store")]
    if body:
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
