"""The watch host's one connection to the observer: the bearer stays on this side.

Requests carry only a short allowlist of the browser's headers, and replies give back only
a status, a content type and a body, so neither the bearer nor anything that could carry
it crosses to the browser. When the observer answers 401 (the bearer was rotated) or cannot
be reached (the runtime restarted on a new port), the access is read again from
``discovery.json`` and the bearer file, and the request is sent once more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

import httpx2

from zodex_gateway.local.lifecycle import LocalError
from zodex_gateway.local.observer_access import ObserverAccess

AccessSource = Callable[[], ObserverAccess]
STEER_OFF: Final = "typing into sessions is off; set observer.steer = true and restart Zodex Local"

# Headers of the browser's request the observer may see; everything else (cookies
# included) stays behind.
FORWARDED_HEADERS: Final = ("accept", "content-type", "last-event-id")
JSON_TIMEOUT: Final = httpx2.Timeout(30.0)
# The observer sends a keepalive every 15 s: three missed ones mean it is gone.
EVENTS_TIMEOUT: Final = httpx2.Timeout(30.0, read=45.0)


class ObserverUnavailable(Exception):
    """The observer could not answer; the browser gets ``status_code`` and ``message``."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


class ObserverProxy:
    def __init__(self, source: AccessSource, *, transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self._source = source
        self._access: ObserverAccess | None = None
        # trust_env=False: an HTTP(S)_PROXY in the environment must never see the bearer.
        self._client = httpx2.AsyncClient(transport=transport, trust_env=False, follow_redirects=False)

    def _current(self, *, refresh: bool) -> ObserverAccess:
        if refresh or self._access is None:
            try:
                self._access = self._source()
            except LocalError as exc:
                raise ObserverUnavailable(503, str(exc)) from None
        return self._access

    async def send(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        *,
        body: bytes | None = None,
        stream: bool = False,
        steer: bool = False,
    ) -> httpx2.Response:
        """The observer's response to ``method path?query``; the caller closes a streamed one.
        ``steer``: sent with the steer token instead of the bearer (the steer route)."""
        forwarded = {name: headers[name] for name in FORWARDED_HEADERS if name in headers}
        # Identity: streamed bytes go to the browser exactly as they arrive.
        forwarded["accept-encoding"] = "identity"
        access = self._current(refresh=False)
        if steer and access.steer_token is None:
            access = self._current(refresh=True)  # the runtime may have restarted with it on
        for attempt in range(2):
            credentials = access.steer_headers if steer else access.headers
            if credentials is None:
                raise ObserverUnavailable(403, STEER_OFF)
            url = f"{access.base_url}{path}" + (f"?{query}" if query else "")
            request = self._client.build_request(
                method,
                url,
                headers={**forwarded, **credentials},
                content=body,
                timeout=EVENTS_TIMEOUT if stream else JSON_TIMEOUT,
            )
            try:
                response = await self._client.send(request, stream=stream)
            except httpx2.TransportError:
                if attempt:
                    raise ObserverUnavailable(
                        502, "the Zodex Local observer is not reachable; is the runtime still running?"
                    ) from None
                access = self._current(refresh=True)
                continue
            if response.status_code != 401:
                return response
            await response.aclose()
            if attempt:
                break
            access = self._current(refresh=True)
        token = "steer token" if steer else "bearer token"
        raise ObserverUnavailable(502, f"the observer refused the viewer's {token}")

    async def aclose(self) -> None:
        await self._client.aclose()
