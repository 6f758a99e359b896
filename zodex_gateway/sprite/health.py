"""``zodex sprite health``: the service answers as a client would see it.

Two checks against the service on this host (``SpriteSettings.local_url``): ``GET /health``
must answer ``{"status": "ok", "component": "zodex-sprite", …}``, and a real MCP session
with the key (``?key=``, the connector's form) must list exactly the three tools.

The key goes only to a listener of the service: before the MCP request, the kernel's socket
tables must show that every socket listening on the service's port belongs to root (the
service opens it before it drops root) or to the service account, so a process of the
agent that took the port (the service stopped, say) is never sent the key.

With TLS the certificate of the config is the trust anchor and the host name is not
checked: the check talks to loopback, not to the name the certificate was made for.

The MCP SDK's HTTP transport takes an ``httpx2`` client (Zodex's one HTTP client,
docs/architecture.md#dependencies), which is how the TLS trust anchor reaches it.
"""

from __future__ import annotations

import pwd
import ssl
from dataclasses import dataclass

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from zodex_system.listeners import listener_uids

from .settings import SpriteSettings

EXPECTED_TOOLS = ("apply_patch", "exec_command", "write_stdin")
TIMEOUT_S = 15.0


class HealthError(Exception):
    """The service is not healthy; one line saying what failed."""


@dataclass(frozen=True)
class Health:
    version: str
    tools: tuple[str, ...]


def _verify(settings: SpriteSettings) -> ssl.SSLContext | bool:
    if settings.tls_cert is None:
        return True
    context = ssl.create_default_context(cafile=str(settings.tls_cert))
    context.check_hostname = False
    # A certificate issued by a CA is trusted as itself, without its chain.
    context.verify_flags |= getattr(ssl, "VERIFY_X509_PARTIAL_CHAIN", 0)
    return context


async def _check(settings: SpriteSettings, key: str) -> Health:
    base = settings.local_url()
    async with httpx2.AsyncClient(verify=_verify(settings), timeout=TIMEOUT_S, trust_env=False) as http:
        try:
            response = await http.get(f"{base}/health")
        except httpx2.HTTPError as exc:
            raise HealthError(f"GET {base}/health failed: {exc or type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code != 200 or not isinstance(body, dict) or body.get("status") != "ok":
            raise HealthError(f"GET {base}/health answered {response.status_code}: {response.text[:200]!r}")
        version = str(body.get("version", "?"))
        _check_listener(settings)
        try:
            with anyio.fail_after(TIMEOUT_S):
                async with Client(
                    streamable_http_client(f"{base}/mcp?key={key}", http_client=http)
                ) as client:
                    listed = await client.list_tools()
        except TimeoutError:
            raise HealthError(f"MCP tools/list at {base}/mcp got no answer within {TIMEOUT_S:g}s") from None
        except Exception as exc:  # the SDK raises many kinds; each is one failed check
            raise HealthError(f"MCP tools/list at {base}/mcp failed: {_reason(exc)}") from None
    tools = tuple(sorted(tool.name for tool in listed.tools))
    if tools != EXPECTED_TOOLS:
        raise HealthError(
            f"MCP lists {', '.join(tools) or 'no tools'}; expected exactly {', '.join(EXPECTED_TOOLS)}"
        )
    return Health(version, tools)


def _check_listener(settings: SpriteSettings) -> None:
    """Refuse, before the key is sent, a port that any other account listens on."""
    # root: the service binds before it drops to its account (a port below 1024, say).
    try:
        service_uid = pwd.getpwnam(settings.service_user).pw_uid
    except KeyError:
        raise HealthError(
            f"the service account {settings.service_user} does not exist; the key was not sent"
        ) from None
    owners = listener_uids(settings.port)
    others = owners - {0, service_uid}
    if others or not owners:
        named = ", ".join(sorted(_account(uid) for uid in others)) or "nobody"
        raise HealthError(
            f"port {settings.port} is listened on by {named}, not only by the service "
            f"({settings.service_user} or root); the key was not sent"
        )


def _account(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _reason(exc: BaseException) -> str:
    """The innermost cause of an exception group (the SDK runs its transport in a task group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def check_health(settings: SpriteSettings, key: str) -> Health:
    return anyio.run(_check, settings, key)
