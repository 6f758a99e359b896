"""Read-only observer API (issue 6, item 1): agents, invocations, output and the timeline.

:func:`create_observer_app` builds a Starlette app over a :class:`HistoryStore`, guarded
by a bearer token. Times are ISO 8601 UTC; cursors are opaque; every response is
``Cache-Control: no-store`` and errors are ``{"schema_version": 1, "error": "…"}``.
"""

from zodex_gateway.observer.app import create_observer_app

__all__ = ["create_observer_app"]
